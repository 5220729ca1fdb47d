"""Random access into tar shards, packer's own or any other tool's.

A shard is indexed once by reading only its member headers: the index holds each
sample's key and each member's field, data offset and size. Reading a run of
samples is then one read of contiguous bytes, sliced by the index. PAX (`x`) and GNU long-name
(`L`) headers are understood; samples are consecutive members sharing a key,
as webdataset groups them.

packer writes each shard's index beside it when the shard closes (`shard-NNNNNN.idx`,
msgpack): the loader takes it instead of reading every header again, which on a cold
page cache would read most of the shard before the first sample. It is used only for
the shard whose sha256 it records (the manifest's), whose size it gives, and whose
first and last members' headers give their sizes, if its own CRC-32 holds; otherwise
the headers are read.
`verify` and `unpack` always read the headers.
"""

import mmap
import os
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import msgpack
import numpy as np

from packer.errors import DatasetError
from packer.formats.base import PartFiles
from packer.formats.readahead import file_range
from packer.formats.spans import Spans
from packer.sample import KEY, split_member

_BLOCK = 512
_ZERO_BLOCK = bytes(_BLOCK)


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


def _header_size(header: bytes, where: str, offset: int) -> int:
    try:
        return _number(header[124:136])
    except ValueError:
        raise DatasetError(f"{where}: damaged tar header at byte offset {offset:,}: its size "
                           f"field {header[124:136]!r} is not an octal number") from None


def _checksum_ok(header: bytes) -> bool:
    """The header's checksum field against the sum of its bytes (the field counted as
    spaces). Adler-32's first half is 1 + that sum modulo 65521, in C: a flipped bit
    changes the sum by at most 128, so comparing modulo 65521 misses none. A field
    that is not a number is a bad checksum."""
    try:
        stored = _number(header[148:156])
    except ValueError:
        return False
    total = (zlib.adler32(header) & 0xFFFF) - 1 - sum(header[148:156]) + 8 * 32
    return (stored - total) % 65521 == 0


def _tar_like(header: bytes) -> bool:
    """Whether a first block is a tar header, if perhaps a damaged one: one that passes
    its checksum, or has the ustar magic or an octal number in its checksum field."""
    if len(header) == _BLOCK and _checksum_ok(header) or header[257:262] == b"ustar":
        return True
    field = bytes(header[148:156]).strip(b"\0 ")
    try:
        return int(field, 8) > 0  # octal (never base-256), and never 0 in a tar
    except ValueError:
        return False


def _not_a_tar(where: str, head: bytes) -> str:
    return (f"{where}: not a tar file: it starts with {head[:8].hex(' ').upper()}, not with "
            "a tar member header; a WebDataset shard is a tar file, plain or compressed "
            "with gzip, bzip2 or xz")


def members(data, where: str) -> Iterator[tuple[int, str, int, int]]:
    """(offset of the member's first header, name, data offset, size) of each regular
    file member of the archive in `data` (bytes or a memory map)."""
    offset = chain_start = 0
    long_name = long_size = None
    end = len(data)
    while True:
        header = data[offset:offset + _BLOCK]
        if not header or header == _ZERO_BLOCK:  # the end (its zero blocks may be missing)
            return
        if offset == 0 and not _tar_like(header):
            raise DatasetError(_not_a_tar(where, bytes(header)))
        if len(header) < _BLOCK:
            raise DatasetError(f"{where}: truncated: the file ends at byte {end:,}, inside "
                               f"the tar header that starts at byte offset {offset:,}")
        if not _checksum_ok(header):
            raise DatasetError(f"{where}: bad tar header checksum at byte offset {offset:,}")
        size = long_size if long_size is not None else _header_size(header, where, offset)
        kind, data_offset = header[156:157], offset + _BLOCK
        if data_offset + size > end:
            raise DatasetError(f"{where}: truncated: the member at byte offset {chain_start:,} "
                               f"holds {size:,} bytes from offset {data_offset:,}, but the "
                               f"file ends at byte {end:,}")
        offset = data_offset + size + (-size % _BLOCK)
        if kind in (b"x", b"L"):
            extra = data[data_offset:data_offset + size]
            if kind == b"L":
                long_name = extra.rstrip(b"\0").decode("utf-8", "surrogateescape")
            else:
                records = _pax_records(extra)
                long_name = records.get("path", long_name)
                long_size = int(records["size"]) if "size" in records else None
            continue
        if kind in (b"0", b"\0"):
            yield chain_start, long_name or _ustar_name(header), data_offset, size
        chain_start, long_name, long_size = offset, None, None


@dataclass
class ShardIndex:
    """Where every member of a shard is: sample i's members are first[i]..first[i+1]-1."""

    keys: list[str]
    first: np.ndarray  # (samples + 1,) index of each sample's first member
    offset: np.ndarray  # (members,) byte offset of each member's data
    size: np.ndarray  # (members,) bytes of each member's data
    field: list[str]  # (members,) each member's field name

    @property
    def count(self) -> int:
        return len(self.keys)

    def same_fields(self) -> tuple[str, ...] | None:
        """The fields of every sample, if each has the same ones in the same order."""
        if not self.keys:
            return None
        width = int(self.first[1])
        fields = self.field[:width]
        if len(set(fields)) != width or self.field != fields * self.count \
                or not np.array_equal(self.first, np.arange(self.count + 1) * width):
            return None
        return tuple(fields)


def index_shard(path: str) -> ShardIndex:
    """One pass over a shard's headers (through a memory map: no read per header)."""
    keys, first, offsets, sizes, fields = [], [], [], [], []
    with open(path, "rb") as file:
        if os.fstat(file.fileno()).st_size == 0:
            raise DatasetError(f"{path}: an empty file, not a tar shard")
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as view:
            for _, name, data_offset, size in members(view, path):
                key, field = split_member(name)
                if not keys or keys[-1] != key:
                    keys.append(key)
                    first.append(len(offsets))
                offsets.append(data_offset)
                sizes.append(size)
                fields.append(sys.intern(field))
    return ShardIndex(keys, np.array([*first, len(offsets)], np.int64),
                      np.array(offsets, np.int64), np.array(sizes, np.int64), fields)


_INDEX_TAG = "packer tar index 1"
INDEX_SUFFIX = ".idx"  # each shard's saved index, beside it


def index_path(shard) -> Path:
    return Path(shard).with_suffix(INDEX_SUFFIX)


def save_index(shard: Path, sha256: str) -> None:
    """Index the shard just written and keep the index beside it (written whole first
    under a temporary name, so that a killed run leaves none half written)."""
    index, names = index_shard(str(shard)), {}
    codes = np.array([names.setdefault(f, len(names)) for f in index.field], np.uint16)
    payload = msgpack.packb({"tag": _INDEX_TAG, "sha256": sha256,
                             "bytes": os.path.getsize(shard), "keys": index.keys,
                             "names": list(names), "field": codes.tobytes(),
                             "first": index.first.tobytes(), "offset": index.offset.tobytes(),
                             "size": index.size.tobytes()})
    temporary = index_path(shard).with_suffix(".idx.partial")
    temporary.write_bytes(payload + zlib.crc32(payload).to_bytes(4, "little"))
    temporary.replace(index_path(shard))


def saved_index(shard: str, sha256: str) -> ShardIndex | None:
    """The index saved beside `shard` if it is the index of this shard; else None."""
    try:
        data = index_path(shard).read_bytes()
        if zlib.crc32(data[:-4]) != int.from_bytes(data[-4:], "little"):
            return None
        saved = msgpack.unpackb(data[:-4])
        if (saved["tag"] != _INDEX_TAG or saved["sha256"] != sha256
                or saved["bytes"] != os.path.getsize(shard)):
            return None
        names = [sys.intern(name) for name in saved["names"]]
        codes = np.frombuffer(saved["field"], np.uint16).tolist()
        index = ShardIndex(saved["keys"], np.frombuffer(saved["first"], np.int64),
                           np.frombuffer(saved["offset"], np.int64),
                           np.frombuffer(saved["size"], np.int64),
                           list(map(names.__getitem__, codes)))
        return index if _agrees(index, shard) else None
    except (OSError, ValueError, KeyError, TypeError, IndexError, msgpack.UnpackException):
        return None


def _agrees(index: ShardIndex, shard: str) -> bool:
    """Whether the index is consistent and its first and last members are headed in
    the shard by headers of their sizes (names may lie in PAX records before them)."""
    members = len(index.offset)
    if len(index.first) != index.count + 1 or index.first[-1] != members or not members \
            or len(index.size) != members or len(index.field) != members:
        return False
    offset, size = index.offset, index.size  # members in order, a header between each two
    if (offset[1:] < offset[:-1] + size[:-1] + _BLOCK).any() or offset[0] < _BLOCK:
        return False
    with open(shard, "rb") as file:
        for member in (0, members - 1):
            header = os.pread(file.fileno(), _BLOCK, int(offset[member]) - _BLOCK)
            if len(header) < _BLOCK or not _checksum_ok(header) \
                    or _number(header[124:136]) != size[member]:
                return False
    return True


class Reader(PartFiles):
    """Runs of samples from local shards. Each shard is indexed once (the indexes
    survive forks and pickling, for workers to share); files are opened lazily in
    the process that reads, so no file handle crosses a fork."""

    def __init__(self, paths: list[str], int_fields: set[str] = frozenset(),
                 digests: list[str] | None = None):
        self.paths, self.int_fields, self.digests = paths, int_fields, digests
        self._indexes: dict[int, ShardIndex] = {}
        self._fields: dict[int, tuple[str, ...] | None] = {}

    def index(self, part: int) -> ShardIndex:
        """The shard's index: the one saved beside it, given the shard's sha256 (from
        the manifest) in `digests`; otherwise read from its headers."""
        if part not in self._indexes:
            saved = self.digests and saved_index(self.paths[part], self.digests[part])
            self._indexes[part] = saved or index_shard(self.paths[part])
        return self._indexes[part]

    def count(self, part: int) -> int:
        return self.index(part).count

    def read(self, part: int, start: int, count: int) -> list[dict]:
        index, fd = self.index(part), self._fd(part)
        bounds = index.first[start:start + count + 1].tolist()
        if len(bounds) < 2:
            return []
        offsets = index.offset[bounds[0]:bounds[-1]].tolist()
        sizes = index.size[bounds[0]:bounds[-1]].tolist()
        low = offsets[0]
        data = os.pread(fd, offsets[-1] + sizes[-1] - low, low)
        if len(data) != offsets[-1] + sizes[-1] - low:
            raise DatasetError(f"{self.paths[part]}: truncated: the members at byte offsets "
                               f"{low:,} to {offsets[-1] + sizes[-1]:,} were indexed, but the "
                               f"file ends at byte {low + len(data):,} (it was cut or changed "
                               "while being read)")
        samples, fields, base = [], index.field, bounds[0]
        for number, (begin, end) in enumerate(zip(bounds, bounds[1:], strict=False), start=start):
            sample = {KEY: index.keys[number]}
            for member in range(begin - base, end - base):
                value = data[offsets[member] - low:offsets[member] - low + sizes[member]]
                name = fields[member + base]
                sample[name] = (self._int(value, part, offsets[member]) if name in self.int_fields
                                else value)
            samples.append(sample)
        return samples

    def read_columns(self, runs, into=None) -> dict | None:
        """The samples of `runs` as {field: column}: keys and bytes as lists, int fields
        as an int64 array, without a dict per sample; None unless every sample of their
        shards has the same fields in the same order, each int field holding an int (the
        samples are then read one by one, and what differs is named). With `into`, the
        runs are read in turn into the uint8 array `into(nbytes)` gives (if it gives
        one), and a field's bytes are Spans of it: no copy of each value."""
        fields = self._fields_of(runs)
        layouts = [self._layout(run, len(fields)) for run in runs] if fields else []
        if not layouts or any(layout is None for layout in layouts):
            return None
        buffer = into(sum(high - low for low, high, _ in layouts)) if into else None
        values = (self._values_apart(runs, layouts, fields) if buffer is None
                  else self._values_in(buffer, runs, layouts, fields))
        if values is None:
            return None
        return {KEY: [key for run in runs for key in
                      self.index(run.part).keys[run.start:run.start + run.count]], **values}

    def _fields_of(self, runs) -> tuple[str, ...] | None:
        """The fields every sample of the runs' shards has, in order, if they agree."""
        fields = None
        for part in {run.part for run in runs}:
            if part not in self._fields:
                self._fields[part] = self.index(part).same_fields()
            if self._fields[part] is None or fields not in (None, self._fields[part]):
                return None
            fields = self._fields[part]
        return fields

    def _layout(self, run, width: int) -> tuple[int, int, np.ndarray] | None:
        """(first byte, end, (samples, width, 2) array of each member's (start, end)
        from the first byte) of the run's bytes; None if the index is short."""
        index = self.index(run.part)
        offsets = index.offset[run.start * width:(run.start + run.count) * width]
        sizes = index.size[run.start * width:(run.start + run.count) * width]
        if len(offsets) != run.count * width or not len(offsets):
            return None
        low = int(offsets[0])
        bounds = np.stack([offsets - low, offsets - low + sizes], axis=1)
        return low, int(offsets[-1] + sizes[-1]), bounds.reshape(run.count, width, 2)

    def _values_apart(self, runs, layouts, fields) -> dict | None:
        """Each field's values as bytes sliced from each run's own read."""
        values: dict[str, list] = {name: [] for name in fields}
        for run, (low, high, bounds) in zip(runs, layouts, strict=True):
            data = os.pread(self._fd(run.part), high - low, low)
            if len(data) != high - low:
                return None
            for column, name in enumerate(fields):
                at = map(slice, *bounds[:, column].T.tolist())
                values[name].extend(map(data.__getitem__, at))
        return self._with_ints(values)

    def _values_in(self, buffer: np.ndarray, runs, layouts, fields) -> dict | None:
        """Each field's values as Spans of `buffer`, the runs read into it in turn."""
        view, at, bounds_all = memoryview(buffer), 0, []
        for run, (low, high, bounds) in zip(runs, layouts, strict=True):
            if os.preadv(self._fd(run.part), [view[at:at + high - low]], low) != high - low:
                return None
            bounds_all.append(bounds + at)
            at += high - low
        bounds = np.concatenate(bounds_all)
        return self._with_ints({name: Spans(buffer, bounds[:, column, 0], bounds[:, column, 1])
                                for column, name in enumerate(fields)})

    def _with_ints(self, values: dict) -> dict | None:
        """`values`, each int field's as an int64 array; None if one is not an int."""
        try:
            for name in self.int_fields & values.keys():
                column = values[name]
                if isinstance(column, Spans):  # plain digits at once, others by int()
                    ints = column.decimals()
                    column = column.values() if ints is None else ints
                if isinstance(column, list):
                    column = np.array(list(map(int, column)), np.int64)
                values[name] = column
        except (ValueError, OverflowError):
            return None
        return values

    def prefetch(self, runs) -> None:
        """Ask the kernel to read ahead the byte ranges of `runs` (packer.formats.readahead)."""
        for run in runs:
            index = self.index(run.part)
            bounds = index.first[run.start:run.start + run.count + 1]
            if len(bounds) > 1:
                low, last = index.offset[bounds[0]], bounds[-1] - 1
                file_range(self._fd(run.part), int(low),
                           int(index.offset[last] + index.size[last] - low))

    def _int(self, value: bytes, part: int, offset: int) -> int:
        try:
            return int(value)
        except ValueError:
            raise DatasetError(f"{self.paths[part]}: the member at byte offset "
                               f"{offset - _BLOCK:,} holds {bytes(value[:20])!r}, not a class "
                               "id (a decimal integer)") from None

    def read_part(self, part: int, run: int = 1024) -> Iterator[dict]:
        """Every sample of one shard, `run` at a time; its file is closed at the end."""
        try:
            for start in range(0, self.count(part), run):
                yield from self.read(part, start, run)
        finally:
            self.close()
