"""What the operating system tells of a benchmark run: which of a file's pages are in the
page cache, dropping them (a cold read), and the peak memory of the process tree (RSS,
and PSS, which counts the pages that forked workers share once)."""

import ctypes
import mmap
import os
import re
import threading
import time
from pathlib import Path

import psutil

from packer.sources.files.read import read_file


def drop_cache(paths: list[str]) -> None:
    """Evict the files from the page cache; needs no privilege."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def resident_share(path: str) -> float | None:
    """The share of the file's pages in the page cache (mincore), or None where the
    call is not available."""
    size = os.path.getsize(path)
    if size == 0:
        return 0.0
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        page = os.sysconf("SC_PAGE_SIZE")
        with open(path, "rb") as file:
            view = mmap.mmap(file.fileno(), size, access=mmap.ACCESS_COPY)
        pages = (size + page - 1) // page
        vector = (ctypes.c_ubyte * pages)()
        anchor = ctypes.c_char.from_buffer(view)
        failed = libc.mincore(ctypes.c_void_p(ctypes.addressof(anchor)), ctypes.c_size_t(size),
                              vector)
        del anchor
        view.close()
    except (OSError, AttributeError, ValueError):
        return None
    return None if failed else sum(v & 1 for v in vector) / pages


def drop_took_effect(path: str) -> bool:
    """Whether dropping the cache works here: after a read and a drop, none of the
    file's pages are resident (timed re-reads where mincore is missing; under a VM
    the host's own cache still makes 'cold' reads faster than a real disk)."""
    read_file(path)
    drop_cache([path])
    share = resident_share(path)
    if share is not None:
        return share == 0.0
    began = time.perf_counter()
    read_file(path)
    cold = time.perf_counter() - began
    began = time.perf_counter()
    read_file(path)
    return cold > 2 * (time.perf_counter() - began)


HAS_SMAPS_ROLLUP = Path("/proc/self/smaps_rollup").exists()


class MemoryPeak:
    """Peak RSS and PSS of this process and its children, sampled in a thread."""

    def __init__(self, interval: float = 0.05):
        self.interval, self.rss, self.pss = interval, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self._sample_once()
            self._stop.wait(self.interval)

    def _sample_once(self) -> None:
        me = psutil.Process()
        rss = pss = 0
        for process in [me, *me.children(recursive=True)]:
            try:
                process_rss, process_pss = resident_bytes(process)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            rss, pss = rss + process_rss, pss + process_pss
        self.rss, self.pss = max(self.rss, rss), max(self.pss, pss)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample_once()  # a run too short for the thread to have sampled it


def resident_bytes(process: psutil.Process) -> tuple[int, int]:
    """RSS and PSS of one process from a single read of smaps_rollup, so PSS <= RSS.

    psutil takes RSS from statm, whose counters lag behind by many pages in busy
    processes, and PSS from smaps: the two could disagree by megabytes.
    """
    if not HAS_SMAPS_ROLLUP:  # not Linux: RSS stands in for PSS
        rss = process.memory_info().rss
        return rss, rss
    try:
        text = Path(f"/proc/{process.pid}/smaps_rollup").read_text()
    except PermissionError:
        raise psutil.AccessDenied(process.pid) from None
    except OSError:  # gone (ENOENT) or exiting (ESRCH)
        raise psutil.NoSuchProcess(process.pid) from None
    fields = dict(re.findall(r"^(Rss|Pss):\s+(\d+) kB", text, re.MULTILINE))
    if "Rss" not in fields:  # a process that is exiting has an empty rollup
        raise psutil.NoSuchProcess(process.pid)
    return int(fields["Rss"]) * 1024, int(fields.get("Pss", fields["Rss"])) * 1024
