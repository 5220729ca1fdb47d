"""A binary dump read against its spec: the checks, the header values, the records.

`examine_dump` never fails on what the bytes hold: it records every check, so
`inspect-binary` can show what does not fit. `open_dump` is the strict entry for
packing: it raises `DumpError` with the first failed check.

Records are read with `np.fromfile(offset=..., count=...)`, a range at a time, so
memory is bounded by the range asked for, never by the dump. `Dump.write_records`
copies a range of records into another file without reading them into Python.
"""

import errno
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from isal.isal_zlib import crc32

from packer.compressed import PlainFile
from packer.errors import PackerError, UsageProblem
from packer.sample import native_order, values_crc32
from packer.sources.binary.chunks import ChunkProblem, file_spec
from packer.sources.binary.counts import Check, count_check
from packer.sources.binary.fields import Field
from packer.sources.binary.spec import Spec

CHUNK_BYTES = 16 * 2**20  # bytes of records read per step when scanning a whole dump
_READ_BYTES = 4 << 20  # bytes per read when checksumming or copying a range


class DumpError(PackerError):
    """A dump whose bytes do not fit its spec: bad magic, cut records, a wrong count."""


@dataclass(frozen=True)
class Dump:
    path: Path
    spec: Spec
    size: int  # the file's size in bytes
    header: dict  # header field name -> value (int, float, bytes, or a list for shapes)
    count: int  # whole records to read (after --tail drop, if given)
    trailing: int  # bytes after those records
    checks: tuple[Check, ...]
    plain: PlainFile | None = None  # where the bytes are read: path, or its decompressed copy

    @property
    def data_path(self) -> Path:
        return self.plain.path if self.plain else self.path

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def byte_order(self) -> str:
        return self.spec.byte_order

    @property
    def data_offset(self) -> int:
        return self.spec.header.size

    def records(self, start: int = 0, count: int | None = None,
                native: bool = True) -> np.ndarray:
        """Records start..start+count-1 as a structured array (native byte order unless
        `native=False`, which keeps the file's order)."""
        count = self.count - start if count is None else count
        if not (0 <= start and 0 <= count and start + count <= self.count):
            raise UsageProblem(f"{self.path}: records {start:,}..{start + count - 1:,} asked "
                               f"for, but it holds records 0..{self.count - 1:,}")
        dtype = self.spec.record_dtype
        if count == 0:
            return np.empty(0, dtype.newbyteorder("=") if native else dtype)
        offset = self.data_offset + start * dtype.itemsize
        raw = np.fromfile(self.data_path, dtype=np.uint8, count=count * dtype.itemsize,
                          offset=offset)
        if raw.size != count * dtype.itemsize:
            raise _shrank(self.path)
        records = raw.view(dtype)
        if not native or native_order(dtype):
            return records
        # Swapped field by field in place: astype or byteswap() would copy the fields
        # only and leave the padding bytes uninitialised.
        _swap_fields(records)
        return records.view(dtype.newbyteorder("="))

    def values_crc32(self, start: int, stop: int) -> int:
        """The CRC-32 of records start..stop-1 as a reader gets their values (packer.
        sample.values_crc32), computed from the bytes as the spec declares them."""
        return values_crc32(self.records(start, stop - start, native=False))

    def write_records(self, start: int, stop: int, fd: int, offset: int) -> int:
        """Write records start..stop-1, in native byte order, into the open file `fd`
        at `offset`; returns the CRC-32 of the bytes written (ISA-L's, as zlib.crc32).

        A dump in native order is copied by the kernel (`copy_file_range`, as `cp`
        does: the bytes never pass through Python) while a second thread checksums the
        same range, read in pieces (not through a memory map, whose pages fault the
        process with SIGBUS if the dump is cut meanwhile). A dump in the other order
        is read, swapped and written."""
        if not native_order(self.spec.record_dtype):
            raw = self.records(start, stop - start).view(np.uint8)
            _write_at(fd, memoryview(raw), offset)
            return crc32(raw)
        size = self.spec.record.size
        begin, length = self.data_offset + start * size, (stop - start) * size
        with open(self.data_path, "rb") as source, ThreadPoolExecutor(1) as helper:
            checksum = helper.submit(_crc32_of_range, source.fileno(), begin, length,
                                     self.path)
            _copy_range(source.fileno(), fd, begin, offset, length, self.path)
            return checksum.result()

    def chunks(self, chunk_bytes: int = CHUNK_BYTES) -> Iterator[np.ndarray]:
        """Every record, in native-order arrays of about chunk_bytes each."""
        per_chunk = max(1, chunk_bytes // self.spec.record.size)
        for start in range(0, self.count, per_chunk):
            yield self.records(start, min(per_chunk, self.count - start))

    def field_stats(self, chunk_bytes: int = CHUNK_BYTES) -> dict[str, dict]:
        """min/max/mean of each numeric field over all records (every element of a
        shaped field); NaN and infinities are counted apart and left out."""
        numeric = [f for f in self.spec.record.fields if f.kind in ("int", "float")]
        totals = {f.name: _Totals() for f in numeric}
        for chunk in self.chunks(chunk_bytes):
            for field in numeric:
                totals[field.name].add(field.values(chunk[field.name]))
        return {name: t.result() for name, t in totals.items()}


def _swap_fields(records: np.ndarray) -> None:
    """Every number of `records` byte-swapped in place, nested fields and shaped ones too."""
    for name in records.dtype.names:
        field = records[name]
        if field.dtype.names is not None:
            _swap_fields(field)
        else:
            field.byteswap(inplace=True)


def _copy_range(source: int, target: int, begin: int, offset: int, length: int,
                path: Path) -> None:
    """`length` bytes from `begin` in `source` to `offset` in `target`: copied in the
    kernel, or read and written where the file systems cannot do that."""
    try:
        while length:
            copied = os.copy_file_range(source, target, length, begin, offset)
            if not copied:
                raise _shrank(path)
            begin, offset, length = begin + copied, offset + copied, length - copied
    except OSError as err:
        if err.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
            raise
        for piece in _pieces(source, begin, length, path):
            _write_at(target, piece, offset)
            offset += len(piece)


def _write_at(fd: int, data: memoryview, offset: int) -> None:
    while data:
        written = os.pwrite(fd, data, offset)
        data, offset = data[written:], offset + written


def _crc32_of_range(fd: int, begin: int, length: int, path: Path) -> int:
    crc = 0
    for piece in _pieces(fd, begin, length, path):
        crc = crc32(piece, crc)
    return crc


def _pieces(fd: int, begin: int, length: int, path: Path) -> Iterator[memoryview]:
    """`length` bytes at `begin` of a file, read a few MB at a time into one buffer
    (each piece is valid until the next is read); a file cut short is a DumpError."""
    buffer = memoryview(bytearray(min(length, _READ_BYTES)))
    while length:
        got = os.preadv(fd, [buffer[:min(length, len(buffer))]], begin)
        if not got:
            raise _shrank(path)
        yield buffer[:got]
        begin, length = begin + got, length - got


def _shrank(path: Path) -> PackerError:
    return DumpError(f"{path}: the file shrank while it was read")


class _Totals:
    def __init__(self):
        self.low = self.high = None
        self.total, self.finite, self.non_finite = 0.0, 0, 0

    def add(self, values: np.ndarray) -> None:
        finite = values[np.isfinite(values)] if values.dtype.kind == "f" else values.ravel()
        self.non_finite += values.size - finite.size
        if finite.size:
            low, high = finite.min().item(), finite.max().item()
            self.low = low if self.low is None else min(self.low, low)
            self.high = high if self.high is None else max(self.high, high)
            self.total += float(finite.sum(dtype=np.float64))
            self.finite += finite.size

    def result(self) -> dict:
        mean = self.total / self.finite if self.finite else None
        return {"min": self.low, "max": self.high, "mean": mean, "values": self.finite,
                "non_finite": self.non_finite}


def open_dump(path: str | Path, spec: Spec, tail: str | None = None,
              plain: PlainFile | None = None) -> Dump:
    """The dump at path, checked against spec; raises DumpError if any check fails.

    tail: None follows the spec's `trailing`; "drop" packs the whole records and
    leaves out trailing bytes (a cut last record included); "error" refuses them."""
    dump = examine_dump(path, spec, tail, plain)
    failed = next((c for c in dump.checks if not c.ok), None)
    if failed:
        raise DumpError(f"{dump.path}{dump.plain.note}: {failed.message}")
    return dump


def examine_dump(path: str | Path, spec: Spec, tail: str | None = None,
                 plain: PlainFile | None = None) -> Dump:
    """The dump at path with every check's outcome; raises only for a file that is
    missing, a folder or empty, or compressed and damaged. A compressed dump (gzip,
    bz2, xz) is read from its decompressed copy: `plain`, or one made here."""
    path = Path(path)
    dump_size(path)
    plain = plain or PlainFile(path)
    size = plain_size(path, plain)
    if spec.container:
        try:
            spec = file_spec(plain.path, size, spec)
        except ChunkProblem as problem:
            name, message = problem.args
            return Dump(path, spec, size, {}, 0, 0, (Check(name, False, message),), plain)
    drop = tail == "drop" or (tail is None and spec.trailing == "ignore")
    header_size = spec.header.size
    if size < header_size:
        check = Check("header", False, f"{size:,} bytes, shorter than the {header_size:,}-byte "
                                       f"header the spec {spec.source} describes")
        return Dump(path, spec, size, {}, 0, 0, (check,), plain)
    raw_header = read_bytes(plain.path, 0, header_size)
    header = {**header_values(raw_header, spec), **dict(spec.derived)}
    checks = [_expect_check(f, raw_header, spec) for f in spec.header.fields if f.expect]
    records_check, count = count_check(size, header, spec, drop, tail, raw_header)
    checks.append(records_check)
    trailing = size - header_size - count * spec.record.size
    return Dump(path, spec, size, header, count, trailing, tuple(checks), plain)


def dump_size(path: Path) -> int:
    if not path.exists():
        raise UsageProblem(f"{path}: no such file")
    if path.is_dir():
        raise UsageProblem(f"{path}: is a folder; give one binary file")
    size = path.stat().st_size
    if size == 0:
        raise DumpError(f"{path}: the file is empty (0 bytes); nothing to read")
    return size


def plain_size(path: Path, plain: PlainFile) -> int:
    """The size of a file's contents (decompressed, if it is compressed)."""
    size = plain.path.stat().st_size
    if size == 0:
        raise DumpError(f"{path}{plain.note}: the contents are empty (0 bytes); nothing to read")
    return size


def read_bytes(path: Path, offset: int, length: int) -> bytes:
    with open(path, "rb") as file:
        file.seek(offset)
        return file.read(length)


def header_values(raw_header: bytes, spec: Spec) -> dict:
    if not spec.header.size:
        return {}
    values = np.frombuffer(raw_header, dtype=spec.header_dtype, count=1)[0]
    return {f.name: python_value(f, values[f.name]) for f in spec.header.fields
            if f.kind != "pad"}


def python_value(field: Field, value):
    """A field's decoded value as plain Python: bytes, int, float or nested lists."""
    if field.kind == "bytes":
        return np.asarray(value, dtype=np.uint8).tobytes()
    return field.values(np.asarray(value)).tolist()


def _expect_check(field: Field, raw_header: bytes, spec: Spec) -> Check:
    found = raw_header[field.offset:field.end]
    where = f"{field.name} at offset {field.offset}"
    if found == field.expect:
        return Check(field.key, True, f"{where}: {bytes_text(found, field, spec)} "
                                      f"as expected")
    message = (f"{where}: expected {bytes_text(field.expect, field, spec)}, found "
               f"{bytes_text(found, field, spec)}")
    if found[::-1] == field.expect and field.element.itemsize > 1:
        message += (f"; these are the expected bytes reversed: is byte_order = "
                    f"\"{spec.byte_order}\" right?")
    else:
        message += f"; this file does not look like what {spec.source} describes"
    return Check(field.key, False, message)


def bytes_text(raw: bytes, field: Field, spec: Spec) -> str:
    """Bytes as hex, with their text (bytes fields) or number (numeric fields)."""
    hex_text = raw.hex(" ")
    if field.kind == "bytes":
        return f"{hex_text} ({raw.decode('latin-1')!r})"
    value = field.values(np.frombuffer(raw, dtype=field.element).reshape(field.shape))
    return f"{value.item() if value.size == 1 else value.tolist()} ({hex_text})"
