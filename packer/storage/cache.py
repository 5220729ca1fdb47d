"""The bounded local cache of remote parts, shared by every process of a machine.

    CACHE_DIR/                         default: $XDG_CACHE_HOME/packer or ~/.cache/packer
      lock                             flock'd exclusively to reserve room, evict, rename
      parts/
        3f2a9c0d41b2e7aa/              one dataset: a digest of its URL and its manifest
          shard-000003.tar             a whole, checked part; flock'd shared while in use
          shard-000004.tar.part-7b1e   a download in progress, flock'd exclusively by the
                                       process downloading it, allocated at its full size

A part is downloaded under a temporary name, after its room is reserved (the file is
allocated at its full size, so a full disk shows before any byte is fetched), and
renamed to its name only when its size and sha256 match what the manifest says: a
killed download is never read. A whole part whose bytes no longer match its sha256
(damaged on this disk since) is removed when a check finds it (`drop_damaged`), to be
downloaded again. Room is made by removing the least recently used
whole parts that no process holds (removal takes the exclusive lock without
waiting, so a part in use is never removed). Every file under `parts/` counts
against the limit, downloads in progress at their full size. The locks are the
kernel's (flock), which end with their process: after a `kill -9` nothing is left
that blocks, and the next process that reserves room removes the dead download's
temporary file. Nothing lives in /dev/shm or in memory shared between processes.
"""

import contextlib
import errno
import fcntl
import hashlib
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from packer.errors import DatasetError, PackerError
from packer.text import size_bytes

DEFAULT_LIMIT = 20 * 10**9  # bytes, and never more than DISK_SHARE of the disk's free space
DISK_SHARE = 0.8
PARTS = "parts"
TEMP_MARK = ".part-"
_WAIT_FOR_ROOM = 0.2  # seconds between looks for room that readers have released


def default_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "packer"


class CacheFull(PackerError):
    """The cache's disk has no room for a part."""


class HeldPart:
    """A whole part in the cache, held (a shared lock) until `release()`."""

    def __init__(self, path: Path, fd: int):
        self.path, self._fd = path, fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class PartCache:
    """Parts of remote datasets on local disk, at most `limit` bytes in all (an int or
    a size such as "20GB"). Picklable: it holds a folder and a number, no handles."""

    def __init__(self, root=None, limit=None):
        self.root = Path(root).expanduser() if root is not None else default_dir()
        try:
            (self.root / PARTS).mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise PackerError(f"cache_dir {self.root}: cannot be made ({err.strerror}); "
                              "pass another cache_dir") from None
        try:
            self.limit = (size_bytes(limit) if limit is not None else
                          min(DEFAULT_LIMIT, int(shutil.disk_usage(self.root).free * DISK_SHARE)))
        except ValueError as err:
            raise PackerError(f"cache_limit: {err}") from None

    def folder(self, dataset: str) -> Path:
        return self.root / PARTS / dataset

    def acquire(self, dataset: str, name: str, size: int, sha256: str | None,
                fetch: Callable, source: str) -> HeldPart:
        """The part `name` of `dataset`, whole and held: from the cache, or fetched with
        `fetch(file) -> (bytes written, sha256)` from `source` (named in errors)."""
        path = self.folder(dataset) / quote(name, safe="")
        if size > self.limit:
            raise CacheFull(f"{source}: {size:,} bytes, more than the whole cache_limit of "
                            f"{self.limit:,} bytes ({self.root}); pass a larger cache_limit")
        while True:
            held = _open_whole(path, size)
            if held is not None:
                return held
            with self._locked():
                held = _open_whole(path, size)
                if held is not None:
                    return held
                busy = _live_download(path)
                reserved = None if busy else self._reserve(path, size, source)
            if busy is not None:
                _wait_for(busy)
            elif reserved is None:
                time.sleep(_WAIT_FOR_ROOM)
            else:
                return self._fill(reserved, path, size, sha256, fetch, source)

    def acquire_all(self, dataset: str, files: list[tuple]) -> list[HeldPart]:
        """Each of `files` ((name, size, sha256, fetch, source), as `acquire` takes
        them) whole and held: the files of one part (a TFRecord and its index). Room is
        reserved for all the missing ones at once, or for none: two readers that each
        held some of their part's files while they waited for room for the rest would
        wait for each other for ever."""
        total = sum(file[1] for file in files)
        if total > self.limit:
            raise CacheFull(f"{files[0][4]} and the other files of its part: {total:,} bytes, "
                            f"more than the whole cache_limit of {self.limit:,} bytes "
                            f"({self.root}); pass a larger cache_limit")
        if len(files) == 1:
            return [self.acquire(dataset, *files[0])]
        while True:
            held, reserved, busy = self._gather(dataset, files)
            if reserved is not None:
                break
            for part in held.values():
                part.release()
            if busy is not None:
                _wait_for(busy)
            else:
                time.sleep(_WAIT_FOR_ROOM)
        waiting = list(reserved.items())
        try:
            while waiting:
                index, (room, path) = waiting[0]
                name, size, sha256, fetch, source = files[index]
                held[index] = self._fill(room, path, size, sha256, fetch, source)
                waiting.pop(0)
        except BaseException:  # _fill gave back the room of the one that failed
            for part in held.values():
                part.release()
            self._unreserve([room for _, (room, _) in waiting[1:]])
            raise
        return [held[index] for index in range(len(files))]

    def drop_damaged(self, dataset: str, files: list[tuple]) -> list[str]:
        """Remove the whole copies of `files` (as `acquire_all` takes them) whose sha256
        is no longer the one given: damaged on this disk since they were checked, they
        are downloaded again by the next `acquire`. Returns the sources removed."""
        dropped = []
        for name, size, sha256, _, source in files:
            held = None if sha256 is None else _open_whole(
                self.folder(dataset) / quote(name, safe=""), size)
            if held is None:
                continue
            with open(held.path, "rb") as file:
                damaged = hashlib.file_digest(file, "sha256").hexdigest() != sha256
            held.release()
            if damaged:
                with self._locked():
                    held.path.unlink(missing_ok=True)  # readers that hold it keep theirs
                dropped.append(source)
        return dropped

    def _gather(self, dataset: str, files: list[tuple]):
        """({index: held whole file}, {index: (reserved room, path)} for the others, or
        None when one is being downloaded elsewhere (then also its temporary file) or the
        cache has no room for them all now)."""
        held, reserved = {}, {}
        with self._locked():
            try:
                for index, (name, size, _, _, source) in enumerate(files):
                    path = self.folder(dataset) / quote(name, safe="")
                    found = _open_whole(path, size)
                    if found is not None:
                        held[index] = found
                        continue
                    busy = _live_download(path)
                    room = None if busy else self._reserve(path, size, source)
                    if room is None:
                        self._unreserve([room for room, _ in reserved.values()], locked=True)
                        return held, None, busy
                    reserved[index] = room, path
            except BaseException:  # a full disk: nothing of the part stays reserved or held
                self._unreserve([room for room, _ in reserved.values()], locked=True)
                for part in held.values():
                    part.release()
                raise
        return held, reserved, None

    def _unreserve(self, rooms: list[tuple[Path, int]], locked: bool = False) -> None:
        """Give back reserved room that was not filled."""
        if not rooms:
            return
        with contextlib.nullcontext() if locked else self._locked():
            for temp, fd in rooms:
                temp.unlink(missing_ok=True)
                os.close(fd)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def usage(self) -> int:
        """Bytes of every file under parts/ now (files removed meanwhile left out)."""
        total = 0
        for entry in self._entries():
            try:
                total += entry.stat().st_size
            except FileNotFoundError:
                pass
        return total

    def _entries(self) -> list[os.DirEntry]:
        entries = []
        for folder in os.scandir(self.root / PARTS):
            try:
                entries += [e for e in os.scandir(folder.path) if e.is_file()]
            except (FileNotFoundError, NotADirectoryError):
                pass
        return entries

    def _reserve(self, path: Path, size: int, source: str) -> tuple[Path, int] | None:
        """(temporary file, its locked descriptor) allocated at `size` bytes once room is
        made; None when the parts held by readers leave no room now. Under the lock."""
        entries = [e for e in self._entries() if not (TEMP_MARK in e.name and _remove_dead(e))]
        used = sum(e.stat().st_size for e in entries)
        whole = sorted((e for e in entries if TEMP_MARK not in e.name),
                       key=lambda e: e.stat().st_mtime_ns)
        for entry in whole:
            if used + size <= self.limit:
                break
            if _evict(entry.path):
                used -= entry.stat().st_size
        if used + size > self.limit:
            return None
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(path.name + TEMP_MARK + secrets.token_hex(4))
        fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if size:
                os.posix_fallocate(fd, 0, size)
        except OSError as err:
            os.close(fd)
            temp.unlink()
            raise self._full(err, source, size) from None
        return temp, fd

    def _full(self, err: OSError, source: str, size: int) -> PackerError:
        if err.errno not in (errno.ENOSPC, errno.EDQUOT):
            return PackerError(f"cache_dir {self.root}: cannot write {source} there "
                               f"({err.strerror})")
        free = shutil.disk_usage(self.root).free
        return CacheFull(f"cache_dir {self.root}: its disk is full ({free:,} bytes free, "
                         f"{source} needs {size:,}); free some space, or pass another "
                         "cache_dir or a smaller cache_limit")

    def _fill(self, reserved: tuple[Path, int], path: Path, size: int, sha256: str | None,
              fetch: Callable, source: str) -> HeldPart:
        """Download into the reserved file; renamed to `path` once checked, held shared."""
        temp, fd = reserved
        try:
            with os.fdopen(os.dup(fd), "r+b") as file:
                written, digest = fetch(file)
            if written != size or (sha256 is not None and digest != sha256):
                expected = f"{size:,} bytes" + (f", sha256 {sha256[:12]}" if sha256 else "")
                raise DatasetError(f"{source}: downloaded {written:,} bytes, sha256 "
                                   f"{digest[:12]}, but the manifest says {expected}: the "
                                   "object changed or was damaged after it was packed; "
                                   "restore it, or pack the dataset again")
        except BaseException as err:
            with self._locked():
                temp.unlink(missing_ok=True)
            os.close(fd)
            if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
                raise self._full(err, source, size) from None
            raise
        with self._locked():
            fcntl.flock(fd, fcntl.LOCK_SH)
            os.rename(temp, path)
        return HeldPart(path, fd)


def _open_whole(path: Path, size: int) -> HeldPart | None:
    """The whole part at `path`, held shared, or None when it is not (or no longer) there."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    fcntl.flock(fd, fcntl.LOCK_SH)
    try:
        same = os.stat(path).st_ino == os.fstat(fd).st_ino  # not evicted while we locked
    except FileNotFoundError:
        same = False
    if not same or os.fstat(fd).st_size != size:
        os.close(fd)
        return None
    os.utime(fd)  # the modification time orders eviction: least recently used first
    return HeldPart(path, fd)


def _try_exclusive(path) -> int | None:
    """A descriptor of `path` locked exclusively, or None when a process holds it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _evict(path: str) -> bool:
    """Remove a whole part that no process holds; False when one does."""
    fd = _try_exclusive(path)
    if fd is None:
        return False
    os.unlink(path)
    os.close(fd)
    return True


def _remove_dead(entry: os.DirEntry) -> bool:
    """Remove a temporary file whose download died with its process; False if it lives."""
    return _evict(entry.path)


def _live_download(path: Path) -> Path | None:
    """A download of `path` in progress in a live process (dead ones are removed)."""
    if not path.parent.is_dir():
        return None
    for temp in path.parent.glob(path.name + TEMP_MARK + "*"):
        if not _evict(str(temp)):
            return temp
    return None


def _wait_for(temp: Path) -> None:
    """Until the download into `temp` ends (renamed, or removed on failure)."""
    try:
        fd = os.open(temp, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
    finally:
        os.close(fd)
