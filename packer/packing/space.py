"""A full disk while packing: one message, nothing published, the work kept for
`--resume`. Room is checked before each chunk or part is written; a disk that fills
between the check and the write is recognised by its error, except by HDF5, which
crashes the process then, so its writer claims the blocks before writing."""

import errno
import shutil
from contextlib import contextmanager
from pathlib import Path

from packer.errors import PackerError, Resumable

MARGIN = 8 << 20  # room kept for a format's metadata, the manifest and progress.json
NEARLY_FULL = 1 << 20  # an error with less room than this left is taken as a full disk


class DiskFull(Resumable):
    """No room left for the output; the partial output is kept for --resume."""


def _message(folder: Path, detail: str) -> str:
    return (f"{folder}: the disk is full ({detail}). Nothing was published; what is written "
            f"so far stays in {folder}: free some space and run the same command with "
            "--resume to continue")


def check_room(folder: Path, need: int) -> None:
    """A DiskFull unless `need` bytes and the margin fit on the output's disk."""
    free = shutil.disk_usage(folder).free
    if free < need + MARGIN:
        raise DiskFull(_message(folder, f"{free / 1e6:,.1f} MB free, and the next part needs "
                                        f"about {(need + MARGIN) / 1e6:,.1f} MB"))


def _is_disk_full(err: BaseException) -> bool:
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(err)  # HDF5 and LMDB report it in their own exception types
    return "No space left on device" in text or "errno = 28" in text


@contextmanager
def disk_full_reported(folder: Path):
    """Turn any error that says the disk is full into a DiskFull naming `folder`."""
    try:
        yield
    except PackerError:
        raise
    except Exception as err:
        if not (_is_disk_full(err) or shutil.disk_usage(folder).free < NEARLY_FULL):
            raise  # (LMDB says "Input/output error" when the disk fills)
        raise DiskFull(_message(folder, f"{type(err).__name__}: "
                                        f"{str(err).splitlines()[0]}")) from None
