"""Spec fields: the types a field can have, and one field's table parsed and checked.

`fail(message)` raises the caller's SpecError, so messages carry the spec file's name.
"""

import re
from dataclasses import dataclass

import numpy as np

NUMERIC_TYPES = ("u1", "u2", "u4", "u8", "i1", "i2", "i4", "i8", "f2", "f4", "f8")
# 24-bit integers (audio, ADCs): three bytes in the file, widened to 32 bits when read
# (i3 sign-extended to int32, u3 to uint32), so values are numbers a model can take.
WIDENED_TYPES = {"i3": np.dtype(np.int32), "u3": np.dtype(np.uint32)}
TYPE_HELP = ("u1 u2 u4 u8 i1 i2 i4 i8 f2 f4 f8, i3/u3 (24-bit, read as int32/uint32), bytesN "
             "(e.g. bytes16) or padN (e.g. pad2)")
_SIZED_TYPE = re.compile(r"(bytes|pad)([1-9][0-9]*)")
_FIELD_KEYS = ("type", "shape", "offset", "expect", "expect_hex", "padding")


@dataclass(frozen=True)
class Field:
    """One named run of bytes in the header or in a record."""

    key: str  # where the field is in the spec, e.g. "record.fields.accel"
    name: str
    type: str
    offset: int
    shape: tuple[int, ...]  # bytesN and padN end with an axis of N bytes
    element: np.dtype  # one element, byte order applied; uint8 for bytes, padding, i3/u3
    expect: bytes | None = None  # the expected bytes, in file order
    order: str = "<"  # the byte order of an i3/u3 field ("<" or ">")

    @property
    def kind(self) -> str:
        """"pad", "bytes", "int" or "float"."""
        sized = _SIZED_TYPE.fullmatch(self.type)
        if sized:
            return sized.group(1)
        return "float" if self.element.kind == "f" else "int"

    @property
    def widened(self) -> bool:
        """An i3/u3 field: stored as 3 bytes (the last axis of shape), read as 32 bits."""
        return self.type in WIDENED_TYPES

    @property
    def spec_shape(self) -> tuple[int, ...]:
        """The shape as the spec states it (and as values have it), without the bytes
        axis of bytesN/padN/i3/u3."""
        return self.shape[:-1] if self.kind in ("bytes", "pad") or self.widened else self.shape

    @property
    def value_dtype(self) -> np.dtype:
        """The dtype of the values read (native byte order)."""
        return WIDENED_TYPES[self.type] if self.widened else self.element.newbyteorder("=")

    def values(self, stored: np.ndarray) -> np.ndarray:
        """The field's values from its stored elements: i3/u3 bytes widened, others as
        they are."""
        if not self.widened:
            return stored
        wide = stored.astype(np.uint32)
        low, high = (0, 2) if self.order == "<" else (2, 0)
        value = wide[..., low] | (wide[..., 1] << 8) | (wide[..., high] << 16)
        if self.type == "u3":
            return value
        return (value << 8).astype(np.int32) >> 8  # sign-extended from bit 23

    @property
    def size(self) -> int:
        return self.element.itemsize * int(np.prod(self.shape, dtype=np.int64))

    @property
    def end(self) -> int:
        return self.offset + self.size

    @property
    def dtype(self) -> np.dtype:
        """The field's dtype inside the structured dtype (a sub-array when shaped)."""
        return np.dtype((self.element, self.shape)) if self.shape else self.element


def check_keys(table: dict, allowed: tuple[str, ...], where: str, fail) -> None:
    unknown = [k for k in table if k not in allowed]
    if unknown:
        fail(f"unknown key {unknown[0]!r} in {where}; allowed: {', '.join(allowed)}")


def parse_field(name: str, table, key: str, order: str, next_offset: int, fail) -> Field:
    if not isinstance(table, dict):
        fail(f"{key} = {table!r}: a field is a table, e.g. {name} = {{type = \"u4\"}}")
    check_keys(table, _FIELD_KEYS, key, fail)
    type_name = _field_type(table, key, fail)
    element, bytes_axis = _element(type_name, order, key, fail)
    shape = _shape(table.get("shape", []), key, fail)
    if bytes_axis and type_name.startswith("pad") and shape:
        fail(f"{key}: padding takes no shape; write pad{bytes_axis[0] * int(np.prod(shape))}")
    offset = table.get("offset", next_offset)
    if not is_int(offset) or offset < 0:
        fail(f"{key}.offset = {offset!r}: give a byte offset (an integer, 0 or more)")
    field = Field(key, name, type_name, offset, shape + bytes_axis, element, order=order)
    expect = _expected_bytes(table, field, fail)
    return Field(key, name, type_name, offset, field.shape, element, expect, order)


def _field_type(table: dict, key: str, fail) -> str:
    if "padding" in table:
        size = table["padding"]
        if "type" in table or not is_int(size) or size < 1:
            fail(f"{key}: write padding = N (a byte count, 1 or more) without a type")
        return f"pad{size}"
    if "type" not in table:
        fail(f"{key}: missing key 'type'; use one of {TYPE_HELP}")
    return table["type"]


def _element(type_name, order: str, key: str, fail) -> tuple[np.dtype, tuple[int, ...]]:
    """The element dtype of a type name, and the bytes axis that bytesN/padN add."""
    if type_name in NUMERIC_TYPES:
        return np.dtype(type_name).newbyteorder(order), ()
    if type_name in WIDENED_TYPES:
        return np.dtype(np.uint8), (3,)
    sized = _SIZED_TYPE.fullmatch(type_name) if isinstance(type_name, str) else None
    if not sized:
        fail(f"{key}.type = {type_name!r} is not a type; use one of {TYPE_HELP}")
    return np.dtype(np.uint8), (int(sized.group(2)),)


def _shape(shape, key: str, fail) -> tuple[int, ...]:
    if not isinstance(shape, list) or not all(is_int(n) and n >= 1 for n in shape):
        fail(f"{key}.shape = {shape!r}: give a list of positive integers, e.g. shape = [3]")
    return tuple(shape)


def _expected_bytes(table: dict, field: Field, fail) -> bytes | None:
    if "expect" in table and "expect_hex" in table:
        fail(f"{field.key}: give expect or expect_hex, not both")
    if "expect_hex" in table:
        try:
            expected = bytes.fromhex(str(table["expect_hex"]).removeprefix("0x"))
        except ValueError:
            fail(f"{field.key}.expect_hex = {table['expect_hex']!r}: not hex digits "
                 f"(e.g. \"49 4d 55 31\")")
    elif "expect" in table:
        expected = _encode_expected(table["expect"], field, fail)
    else:
        return None
    if len(expected) != field.size:
        fail(f"{field.key}: the expected value has {len(expected)} bytes but the field "
             f"has {field.size}")
    return expected


def _encode_expected(value, field: Field, fail) -> bytes:
    if field.kind == "bytes":
        if not isinstance(value, str):
            fail(f"{field.key}.expect = {value!r}: a bytes field expects text, e.g. "
                 f"\"RIFF\", or use expect_hex")
        return value.encode("utf-8")
    if field.kind == "pad" or field.spec_shape or isinstance(value, bool) or \
            not isinstance(value, int | float):
        fail(f"{field.key}.expect = {value!r}: expect takes a number for a single "
             f"{field.type} value (use expect_hex for other fields)")
    if field.kind == "int":
        info = None if field.widened else np.iinfo(field.element)
        limits = (range(info.min, info.max + 1) if info else
                  range(-2**23, 2**23) if field.type == "i3" else range(2**24))
        if not is_int(value) or value not in limits:
            fail(f"{field.key}.expect = {value!r} does not fit a {field.type} "
                 f"({limits.start}..{limits.stop - 1})")
    if field.widened:
        raw = (value % 2**24).to_bytes(3, "little")
        return raw if field.order == "<" else raw[::-1]
    return np.array(value, dtype=field.element).tobytes()


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
