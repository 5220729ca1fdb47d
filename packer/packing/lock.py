"""One packing run per output at a time: an exclusive lock beside OUT for the whole
run (fresh, --resume and --overwrite alike). The lock is the kernel's (flock), so a
killed run never leaves a stale one; the lock file is removed when the run ends."""

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path

from packer.errors import PackerError, UsageProblem


def lock_path(out: Path) -> Path:
    return out.with_name(out.name + ".lock")


@contextmanager
def output_lock(out: Path):
    """Hold the lock of `out` for the block; a UsageProblem when another run holds it."""
    path = lock_path(Path(out))
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise PackerError(f"{path}: cannot create the lock file of {out} "
                              f"({err.strerror}); -o must be in a folder you can write "
                              "to") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise UsageProblem(f"{out}: another `packer pack` is writing this output now "
                               f"(it holds {path}); wait for it to end, or choose another "
                               "-o") from None
        if _same_file(fd, path):  # not a lock file that the run before removed
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        path.unlink(missing_ok=True)
        os.close(fd)


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False
