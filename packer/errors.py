"""Errors a user can cause and fix; the CLI shows their message without a traceback."""


class PackerError(Exception):
    """A problem with the user's input or options; the message says what to do."""

    def __init__(self, *args):
        if len(args) == 1 and isinstance(args[0], str) and _WORKER_TRACE in args[0]:
            args = (_raised_message(type(self), args[0]),)
        super().__init__(*args)


# torch re-raises an error from a DataLoader worker as the same type, with the worker's
# traceback as its message; the user is owed the message the error was raised with
_WORKER_TRACE = "DataLoader worker process"


def _raised_message(kind: type, text: str) -> str:
    marker = f"\n{kind.__module__}.{kind.__qualname__}: "
    start = text.rfind(marker)
    return text[start + len(marker):].rstrip("\n") if start >= 0 else text


class BadInputError(PackerError):
    """An input file that cannot be packed, raised under `--on-error fail`."""


class DatasetError(PackerError):
    """A packed dataset that is missing, unfinished, or does not match its manifest."""


class Resumable(PackerError):
    """A pack stopped part way (a full disk, a failed task): nothing was published and the
    partial output is kept for `--resume`."""


class UsageProblem(PackerError):
    """Wrong paths or options (exit status 2, like any usage error)."""


class NoSuchDataset(UsageProblem, DatasetError):
    """A dataset path that does not exist: a usage error, and a dataset error."""
