"""Reading the files of a scanned folder in a packing worker: the bytes of each sample's
files, checked, or the reason to skip them.

A folder on disk is read with plain system calls. A folder in object storage (an
`s3://` prefix, packer/sources/files/objects.py) is read with this process's own S3
client (made on first use, never pickled), FETCHES objects of a job at a time; an
object larger than HEAD_BYTES is first read for its start (a ranged GET) and fetched
whole only when that passes. An object that is gone, or whose size or ETag is not what
the listing said, is skipped with the reason: it changed since the prefix was listed.
"""

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from packer.sources.files.checks import check_head, check_input

HEAD_BYTES = 1 << 20  # a file larger than this is read whole only once its start passes
FETCHES = 16  # objects of a job fetched at once: each GET waits on the network
_POOLS: dict[int, ThreadPoolExecutor] = {}  # by process id: threads never cross a fork

Read = Callable[[str, str, str], tuple[bytes, str | None, list[str]]]


def read_input(path: str, field: str, check: str) -> tuple[bytes, str | None, list[str]]:
    """An input file's bytes, the reason to skip it (None for a good file) and the
    warnings its check gave. A big file whose first bytes already say it is not what
    its name says is not read."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size > HEAD_BYTES and (reason := check_head(field, os.pread(fd, 64, 0), check)):
            return b"", reason, []
        data = _read_all(fd, size)
    finally:
        os.close(fd)
    return data, *check_input(field, data, check)


def read_file(path: str) -> bytes:
    """A whole file, in as few system calls as a small file allows."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return _read_all(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def _read_all(fd: int, size: int) -> bytes:
    chunks = [os.read(fd, size + 1)]
    if len(chunks[0]) != size:  # grown since the stat, or a short read of a big file
        while chunk := os.read(fd, 1 << 24):
            chunks.append(chunk)
    return b"".join(chunks) if len(chunks) > 1 else chunks[0]


def read_sample(read: Read, source: tuple, check: str) -> tuple[dict | None, list]:
    """The sample (key, files, label) read into a dict with `read(relative path, field,
    check)` and the warnings of its files ({"path", "warnings"} entries), or None and
    the skip entries of its files."""
    key, files, label = source
    sample: dict = {"__key__": key}
    warned = []
    for field_name, rel_path in files:
        try:
            data, reason, warnings = read(rel_path, field_name, check)
        except OSError as err:
            reason, warnings = f"cannot read: {err.strerror or err}", []
        if reason:
            others = [{"path": p, "reason": f"belongs to the sample of {rel_path}, which "
                       "was skipped"} for _, p in files if p != rel_path]
            return None, [{"path": rel_path, "reason": reason}, *others]
        if warnings:
            warned.append({"path": rel_path, "warnings": warnings})
        sample[field_name] = data
    if label is not None:
        sample["cls"] = label
    return sample, warned


def _read_in(root: str, rel_path: str, field: str, check: str):
    return read_input(f"{root}/{rel_path}", field, check)


def read_job(job: tuple[str, str, list[tuple]]) -> list[tuple[dict | None, list]]:
    """Read and check one unit of worker work made by `Scan.jobs`."""
    root, check, sources = job
    read = partial(_read_in, root)
    return [read_sample(read, source, check) for source in sources]


def fetch_object(prefix, listed: dict, check: str, file: tuple[str, str]):
    """(bytes, None) of the object `file` (field, path under `prefix`, an S3Url), or
    (b"", the reason to skip it): it is not as listed (`listed[path]`, its size and
    ETag), or its start already says it is not what its name says."""
    from packer.storage.client import get_object

    field, rel_path = file
    size, etag = listed[rel_path]
    url = prefix.child(rel_path)
    if size > HEAD_BYTES:
        head = get_object(url, etag, size, first=64)
        reason = head if isinstance(head, str) else check_head(field, head, check)
        if reason:
            return b"", reason
    data = get_object(url, etag, size)
    return (b"", data) if isinstance(data, str) else (data, None)


def _checked(fetched: dict, rel_path: str, field: str, check: str):
    data, reason = fetched[rel_path]
    return (data, reason, []) if reason else (data, *check_input(field, data, check))


def read_object_job(job: tuple) -> list[tuple[dict | None, list]]:
    """Read and check one unit of worker work made by `ObjectScan.jobs`: its objects
    fetched FETCHES at a time, then checked in this thread (a decode check captures
    what the decoder prints, which threads would mix)."""
    from packer.storage.client import client
    from packer.storage.url import parse

    url, check, sources, listed = job
    client()  # made once, here: making a client is not thread-safe
    files = [file for _, sample_files, _ in sources for file in sample_files]
    fetch = partial(fetch_object, parse(url), listed, check)
    fetched = {rel: got for (_, rel), got in zip(files, _pool().map(fetch, files), strict=True)}
    read = partial(_checked, fetched)
    return [read_sample(read, source, check) for source in sources]


def _pool() -> ThreadPoolExecutor:
    if os.getpid() not in _POOLS:
        _POOLS.clear()
        _POOLS[os.getpid()] = ThreadPoolExecutor(FETCHES, thread_name_prefix="packer-fetch")
    return _POOLS[os.getpid()]
