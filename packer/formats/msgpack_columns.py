"""msgpack maps of one layout, read as columns.

The values of a run of samples whose maps have the same fields, each encoded at the
same length (keys of one length, small class ids, stored pixels of one size), differ
only in the bytes inside their strings, ints and last bin. The bytes before the last
bin are copied out, into one array of one row per value, and each field is a column of
it; the last bin stays where it lies, in its value: nothing is decoded, and no dict or
other object is made, value by value (each would be work for Python's collector, and
thousands at once make it walk every object of the program). Values that differ in
any other byte are left to be decoded one by one.
"""

from typing import NamedTuple

import msgpack
import numpy as np

STR, FIXINT, UINT, BIN = "str", "fixint", "uint", "bin"
_UINT_WIDTHS = {0xcc: 1, 0xcd: 2, 0xce: 4}  # msgpack's uint 8/16/32 markers


class Field(NamedTuple):
    name: str
    kind: str
    start: int  # where the bytes that differ from value to value begin
    end: int


class Layout(NamedTuple):
    length: int  # bytes of each value
    head: int  # bytes of each value up to the rest of its last bin, which may differ
    first: np.ndarray  # those of the value the layout was read from
    same: np.ndarray  # positions in them where every value has the first one's byte
    fields: tuple[Field, ...]


class Bins(NamedTuple):
    """A column of bins: the bytes they all begin with, then each one's rest, which
    is values[i][start:]."""

    head: bytes
    values: list  # bytes-like
    start: int

    def rest(self, i: int) -> memoryview:
        return memoryview(self.values[i])[self.start:]


def layout(value, last: str, head=lambda data: 0) -> Layout | None:
    """The layout of the msgpack map `value` (bytes-like), if its fields are strings
    and non-negative ints, but for the last one, `last`, a bin; else None. The first
    `head(its bytes)` bytes of that bin must be the same in every value (a header of
    its own, such as a .npy file's)."""
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(value)
    try:
        count = unpacker.read_map_header()
        fields = [_field(unpacker, value) for _ in range(count)]
    except (msgpack.UnpackException, ValueError, TypeError):
        return None
    if not fields or None in fields or fields[-1].kind != BIN or fields[-1].name != last \
            or fields[-1].end != len(value) or any(f.kind == BIN for f in fields[:-1]):
        return None
    end = fields[-1].start + head(value[fields[-1].start:])
    differ = np.zeros(end, bool)
    for field in fields[:-1]:
        differ[field.start:field.end] = True
    first = np.frombuffer(value, np.uint8, count=end).copy()  # not a view of the map
    return Layout(len(value), end, first, np.flatnonzero(~differ), tuple(fields))


def _field(unpacker, data) -> Field | None:
    """The next entry of the map `unpacker` reads from `data`."""
    name = unpacker.unpack()
    start = unpacker.tell()
    value = unpacker.unpack()
    end = unpacker.tell()
    if not isinstance(name, str):
        return None
    if isinstance(value, str):
        return Field(name, STR, end - len(value.encode()), end)
    if isinstance(value, bytes):
        return Field(name, BIN, end - len(value), end)
    if type(value) is int and end - start == 1 and 0 <= value < 0x80:
        return Field(name, FIXINT, start, end)
    if type(value) is int and _UINT_WIDTHS.get(data[start]) == end - start - 1:
        return Field(name, UINT, start + 1, end)  # the marker is the same in every value
    return None


def columns(values: list, layout: Layout) -> dict | None:
    """{field: column} of `values` (bytes-like, each a msgpack map) if they all have
    `layout`: strings as a list, ints as an int64 array, the last bin as Bins; None if
    any value differs from the layout."""
    length, head = layout.length, layout.head
    rows = np.empty((len(values), head), np.uint8)
    into, at = memoryview(rows.reshape(-1)), 0
    for value in values:
        if len(value) != length:
            return None
        into[at:at + head] = value[:head]
        at += head
    if not (rows[:, layout.same] == layout.first[layout.same]).all():
        return None
    out = {}
    for field in layout.fields:
        column = rows[:, field.start:min(field.end, head)]
        if field.kind == BIN:
            out[field.name] = Bins(layout.first[field.start:head].tobytes(), values, head)
        elif field.kind == FIXINT:
            if (column >= 0x80).any():
                return None
            out[field.name] = column[:, 0].astype(np.int64)
        elif field.kind == UINT:
            width = field.end - field.start
            out[field.name] = np.ascontiguousarray(column).view(f">u{width}")[:, 0].astype(
                np.int64)
        else:
            out[field.name] = _strings(column)
            if out[field.name] is None:
                return None
    return out


def _strings(column: np.ndarray) -> list[str] | None:
    width, data = column.shape[1], column.tobytes()
    try:
        return [data[at:at + width].decode() for at in range(0, len(data), width)]
    except UnicodeDecodeError:
        return None
