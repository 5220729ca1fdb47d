"""Asking the kernel to read ahead what a reader will read next.

The loader knows each window's runs of samples before it reads them: while it decodes
one window it tells the kernel which bytes the next one needs, so that on a cold page
cache the disk reads them meanwhile, in large requests, instead of on demand. Readers
whose parts are files advise byte ranges of a file (posix_fadvise); LMDB, read through
its memory map, advises the mapped addresses its values lie at (madvise). Advice is
only advice: where the platform has none, nothing happens.
"""

import ctypes
import mmap
import os

import numpy as np

_FILE_ADVICE = getattr(os, "POSIX_FADV_WILLNEED", None)
_MAP_ADVICE = getattr(mmap, "MADV_WILLNEED", None)
DONE = getattr(mmap, "MADV_DONTNEED", None)  # read: out of this process's page tables
_PAGE = mmap.PAGESIZE
NEARBY = 64 << 20  # a run's values further apart than this are not read as one range


def file_range(fd: int, offset: int, length: int) -> None:
    if _FILE_ADVICE is not None and length > 0:
        os.posix_fadvise(fd, offset, length, _FILE_ADVICE)


def _madvise():
    try:
        function = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    return function


_MADVISE = _madvise() if _MAP_ADVICE is not None else None


def mapped_range(first: memoryview, last: memoryview, advice=_MAP_ADVICE) -> None:
    """The mapped memory from the value `first` to the end of the value `last` (both
    seen in one memory map), where the two lie close together. With `advice=DONE`,
    pages already read leave the process's memory (the page cache keeps them), so that
    a reader of a large memory map does not hold all it has read."""
    if _MADVISE is None or advice is None or not len(first) or not len(last):
        return
    low = np.frombuffer(first, np.uint8).ctypes.data
    high = np.frombuffer(last, np.uint8).ctypes.data + len(last)
    if 0 < high - low <= NEARBY:
        start = low - low % _PAGE
        _MADVISE(start, high - start, advice)
