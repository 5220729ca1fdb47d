"""msgpack sample values read in part, where the rest need not be decoded: the key
from the head of a value (what an append checks), or every field but the last bin,
which stays where it lies (stored pixels read in place from LMDB's memory map)."""

import msgpack

from packer.sample import KEY

# msgpack refuses damaged bytes with its own errors and, inside maps, with these
DECODE_ERRORS = (msgpack.UnpackException, ValueError, TypeError)


def decode_value(value) -> dict:
    return msgpack.unpackb(value, raw=False)


_KEY_ENTRY = msgpack.packb(KEY)  # a value's first entry: the key's name, then the key
_KEY_AT = 1 + len(_KEY_ENTRY)


def value_key(value) -> str | None:
    """The key of a stored sample, from the head of its value: a map whose first entry
    is the key (as every sample packer writes begins), so the entries after it (the
    image) are not decoded. None where the value begins otherwise: decode it whole."""
    if len(value) <= _KEY_AT or not 0x81 <= value[0] <= 0x8f \
            or value[1:_KEY_AT] != _KEY_ENTRY:
        return None
    kind = value[_KEY_AT]
    if 0xA0 <= kind <= 0xBF:  # fixstr: its length in the low 5 bits
        start, size = _KEY_AT + 1, kind & 0x1F
    elif kind in (0xD9, 0xDA):  # str 8, str 16: a length of 1 or 2 bytes
        start = _KEY_AT + 1 + (kind - 0xD8)
        size = int.from_bytes(value[_KEY_AT + 1:start], "big")
    else:
        return None
    try:
        return bytes(value[start:start + size]).decode("utf-8") \
            if start + size <= len(value) else None
    except UnicodeDecodeError:
        return None


class InPlace:
    """Values decoded but for `field`, which stays where it lies (a memoryview of the
    value): the copy and the decode of an image's bytes are spared. That holds for a
    value whose last entry is `field` with as many bytes as the first value's (stored
    pixels of one size: LMDB's encode puts them last); any other value is decoded whole."""

    def __init__(self, field: str, first):
        try:
            payload = decode_value(first).get(field)
        except DECODE_ERRORS:
            payload = None
        self.field = field
        self.size = len(payload) if isinstance(payload, bytes) else -1
        # the bytes of the entry before its payload: the name, then the bin header
        self.entry = (msgpack.packb(field) + msgpack.packb(b"\0" * self.size)[:-self.size]
                      if self.size > 0 else None)

    def __call__(self, value) -> dict:
        cut = len(value) - self.size - len(self.entry or b"")
        if self.entry is None or cut < 1 or not 0x81 <= value[0] <= 0x8f \
                or value[cut:cut + len(self.entry)] != self.entry:
            return decode_value(value)
        # the other entries of a fixmap, as a fixmap of one entry fewer
        sample = msgpack.unpackb(bytes((value[0] - 1,)) + value[1:cut], raw=False)
        sample[self.field] = value[cut + len(self.entry):]
        return sample
