"""Random access into tar shards, packer's own or any other tool's.

A shard is indexed once per process by reading only its member headers: the
index is the byte offset where each sample's first header starts (8 bytes per
sample). Reading a run of samples is then one read of contiguous bytes, whose
headers are parsed again to split it into members. PAX (`x`) and GNU long-name
(`L`) headers are understood; samples are consecutive members sharing a key,
as webdataset groups them.
"""

import os
from collections.abc import Callable, Iterator

import numpy as np

from packer.errors import DatasetError
from packer.formats.base import KEY
from packer.keys import split_member

_BLOCK = 512


def _number(field: bytes) -> int:
    if field[0] & 0x80:  # GNU base-256, for sizes past 8 GB
        return int.from_bytes(field[1:], "big")
    return int(field.rstrip(b"\0 ") or b"0", 8)


def _pax_records(data: bytes) -> dict[str, str]:
    records, position = {}, 0
    while position < len(data) and data[position:position + 1] != b"\0":
        space = data.index(b" ", position)
        length = int(data[position:space])
        keyword, _, value = data[space + 1:position + length - 1].partition(b"=")
        records[keyword.decode()] = value.decode("utf-8", "surrogateescape")
        position += length
    return records


def _ustar_name(header: bytes) -> str:
    name = header[:100].split(b"\0", 1)[0]
    prefix = header[345:500].split(b"\0", 1)[0] if header[257:262] == b"ustar" else b""
    return (prefix + b"/" + name if prefix else name).decode("utf-8", "surrogateescape")


def members(read: Callable[[int, int], bytes], offset: int, end: int | None,
            where: str) -> Iterator[tuple[int, str, int, int]]:
    """(offset of the member's first header, name, data offset, size) of each regular
    file member from `offset` up to `end` (None: the end of the archive)."""
    chain_start, long_name, long_size = offset, None, None
    while end is None or offset < end:
        header = read(offset, _BLOCK)
        if len(header) < _BLOCK or header == bytes(_BLOCK):
            return
        if _number(header[148:156]) != sum(header) - sum(header[148:156]) + 8 * 32:
            raise DatasetError(f"{where}: bad tar header checksum at byte offset {offset:,}")
        size = long_size if long_size is not None else _number(header[124:136])
        kind, data_offset = header[156:157], offset + _BLOCK
        offset = data_offset + size + (-size % _BLOCK)
        if kind in (b"x", b"L"):
            data = read(data_offset, size)
            if kind == b"L":
                long_name = data.rstrip(b"\0").decode("utf-8", "surrogateescape")
            else:
                records = _pax_records(data)
                long_name = records.get("path", long_name)
                long_size = int(records["size"]) if "size" in records else None
            continue
        if kind in (b"0", b"\0"):
            yield chain_start, long_name or _ustar_name(header), data_offset, size
        chain_start, long_name, long_size = offset, None, None


def index_shard(fd: int, where: str) -> np.ndarray:
    """Offsets where each sample starts, then the offset where the last one ends."""
    starts, last_key, end = [], None, 0
    for start, name, data_offset, size in members(lambda o, n: os.pread(fd, n, o), 0, None,
                                                 where):
        key = split_member(name)[0]
        if key != last_key:
            starts.append(start)
            last_key = key
        end = data_offset + size + (-size % _BLOCK)
    return np.array([*starts, end], dtype=np.int64)


class Reader:
    """Runs of samples from local shards. Files are opened and indexed once per
    process, lazily, so forked workers never share them."""

    def __init__(self, paths: list[str], int_fields: set[str] = frozenset()):
        self.paths, self.int_fields = paths, int_fields
        self._fds: dict[int, int] = {}
        self._indexes: dict[int, np.ndarray] = {}
        self._pid = None

    def _open(self, part: int) -> int:
        if self._pid != os.getpid():  # inherited across fork: start afresh
            self._fds, self._indexes, self._pid = {}, {}, os.getpid()
        if part not in self._fds:
            self._fds[part] = os.open(self.paths[part], os.O_RDONLY)
            self._indexes[part] = index_shard(self._fds[part], self.paths[part])
        return self._fds[part]

    def count(self, part: int) -> int:
        self._open(part)
        return len(self._indexes[part]) - 1

    def read(self, part: int, start: int, count: int) -> list[dict]:
        fd = self._open(part)
        index = self._indexes[part]
        low, high = int(index[start]), int(index[min(start + count, len(index) - 1)])
        data = os.pread(fd, high - low, low)
        samples: list[dict] = []
        for _, name, offset, size in members(lambda o, n: data[o - low:o - low + n], low, high,
                                             self.paths[part]):
            key, field = split_member(name)
            if not samples or samples[-1][KEY] != key:
                samples.append({KEY: key})
            value = data[offset - low:offset - low + size]
            samples[-1][field] = int(value) if field in self.int_fields else value
        return samples

    def close(self) -> None:
        if self._pid == os.getpid():
            for fd in self._fds.values():
                os.close(fd)
        self._fds, self._indexes = {}, {}
