"""Errors a user can cause and fix; the CLI shows their message without a traceback."""


class PackerError(Exception):
    """A problem with the user's input or options; the message says what to do."""


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
