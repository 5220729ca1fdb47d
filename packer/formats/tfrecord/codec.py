"""TFRecord framing and the `tf.train.Example` protobuf, by hand (no TensorFlow, no
protobuf runtime).

A record is `uint64 length | uint32 masked CRC-32C of length | data | uint32 masked
CRC-32C of data`, little-endian; the mask is ((crc >> 15) | (crc << 17)) + 0xa282ead8
mod 2^32. The data is an Example:

    Example   { Features features = 1; }
    Features  { map<string, Feature> feature = 1; }   (entries: key = 1, value = 2)
    Feature   { oneof { BytesList bytes_list = 1; FloatList float_list = 2;
                        Int64List int64_list = 3; } }
    BytesList { repeated bytes value = 1; }
    FloatList { repeated float value = 1 [packed = true]; }
    Int64List { repeated int64 value = 1 [packed = true]; }

Encoding writes packed lists; decoding also reads unpacked ones, skips unknown fields,
and lets a later map entry of the same name win, as protobuf does.
"""

from functools import lru_cache

from crc32c import crc32c

from packer.sample import KEY, field_bytes

HEADER = 12  # length and its CRC
FOOTER = 4  # the data's CRC
BYTES_LIST, FLOAT_LIST, INT64_LIST = 1, 2, 3
_LEN = 2  # the wire type of a length-delimited field
_MASK_DELTA = 0xA282EAD8
_U32, _U64 = (1 << 32) - 1, (1 << 64) - 1
_KIND_TAG = {kind: bytes([kind << 3 | _LEN]) for kind in (BYTES_LIST, FLOAT_LIST, INT64_LIST)}


class ProtobufError(ValueError):
    """Bytes that are not a well-formed Example (the record's CRC was right)."""


def masked_crc(data, crc: int = 0) -> int:
    crc = crc32c(data, crc)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & _U32


def varint(value: int) -> bytes:
    if value < 0x80:
        return _SMALL[value]
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL = [bytes([n]) for n in range(0x80)]


def _varint_size(value: int) -> int:
    return 1 if value < 0x80 else (value.bit_length() + 6) // 7


@lru_cache(maxsize=1 << 14)  # a field's head depends only on its payload's size
def _entry_head(name: str, kind: int, size: int) -> bytes:
    """A Features map entry up to its payload, which is the `size` bytes of a BytesList
    value, a packed FloatList or a packed Int64List (the same shape on the wire)."""
    name_bytes = name.encode("utf-8", "surrogateescape")
    list_size = 1 + _varint_size(size) + size
    feature_size = 1 + _varint_size(list_size) + list_size
    entry_size = 2 + _varint_size(len(name_bytes)) + len(name_bytes) \
        + _varint_size(feature_size) + feature_size
    return b"".join((b"\x0a", varint(entry_size), b"\x0a", varint(len(name_bytes)),
                     name_bytes, b"\x12", varint(feature_size), _KIND_TAG[kind],
                     varint(list_size), b"\x0a", varint(size)))


def _feature(value) -> tuple[int, bytes]:
    """(kind, payload) of a field value: bytes as a BytesList, an int (a class id) as an
    Int64List, a little-endian float32 array as a FloatList (in C order; an array laid
    out in Fortran order keeps its .npy bytes, which record the order), anything else
    as its canonical bytes (an array as a .npy file)."""
    if type(value) is bytes:
        return BYTES_LIST, value
    if isinstance(value, int):
        if not -(1 << 63) <= value < 1 << 63:
            raise ValueError(f"{value} does not fit an int64 feature")
        return INT64_LIST, varint(value & _U64)
    if getattr(value, "dtype", None) == "<f4" and (value.flags.c_contiguous
                                                   or not value.flags.f_contiguous):
        return FLOAT_LIST, value.tobytes()
    return BYTES_LIST, field_bytes(value)


def encode_record(sample: dict) -> list[bytes]:
    """One framed record holding the sample as an Example: the key as the bytes
    feature `__key__`, then one feature per field."""
    key = sample[KEY].encode("utf-8", "surrogateescape")
    pieces = [b"\x0a", b"", _entry_head(KEY, BYTES_LIST, len(key)), key]
    for name, value in sample.items():
        if name != KEY:
            kind, payload = _feature(value)
            pieces += (_entry_head(name, kind, len(payload)), payload)
    pieces[1] = varint(sum(map(len, pieces)) - 1)  # the size of the Features message
    data = b"".join(pieces)
    length = len(data).to_bytes(8, "little")
    return [length, masked_crc(length).to_bytes(4, "little"), data,
            masked_crc(data).to_bytes(4, "little")]


def _read_varint(data, position: int, end: int) -> tuple[int, int]:
    if position < end and data[position] < 0x80:
        return data[position], position + 1
    result = shift = 0
    while position < end:
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, position
        shift += 7
        if shift > 63:
            break
    raise ProtobufError(f"a varint cut short or too long at byte {position} of the record")


def _fields(data, position: int, end: int) -> list[tuple[int, int, object]]:
    """(field number, wire type, value) of each field in data[position:end]: the value
    is an int for varints and fixed-width fields, (start, stop) for length-delimited."""
    fields = []
    while position < end:
        tag, position = _read_varint(data, position, end)
        number, wire = tag >> 3, tag & 7
        if wire == _LEN:
            size, position = _read_varint(data, position, end)
            value, position = (position, position + size), position + size
        elif wire == 0:
            value, position = _read_varint(data, position, end)
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            value, position = int.from_bytes(data[position:position + width], "little"), \
                position + width
        else:
            raise ProtobufError(f"field {number} has wire type {wire} (groups are not used "
                                "in an Example)")
        if position > end:
            raise ProtobufError(f"field {number} runs past its message")
        fields.append((number, wire, value))
    return fields


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _list_values(data, kind: int, start: int, end: int) -> list:
    """The values of a BytesList (bytes), FloatList (a bytes string of float32) or
    Int64List (ints), packed or not."""
    values = []
    for number, wire, value in _fields(data, start, end):
        if number != 1:
            continue
        if kind == BYTES_LIST and wire == _LEN:
            values.append(bytes(data[value[0]:value[1]]))
        elif kind == FLOAT_LIST and wire == _LEN:
            values.append(bytes(data[value[0]:value[1]]))
        elif kind == FLOAT_LIST and wire == 5:
            values.append(value.to_bytes(4, "little"))
        elif kind == INT64_LIST and wire == _LEN:
            values += _packed_int64(data, *value)
        elif kind == INT64_LIST and wire == 0:
            values.append(_signed(value))
        else:
            raise ProtobufError(f"a list value of wire type {wire}")
    return values


def _feature_value(data, start: int, end: int) -> tuple[int, list]:
    kind, values = BYTES_LIST, []
    for number, wire, value in _fields(data, start, end):
        if wire == _LEN and number in _KIND_TAG:  # the last of the oneof wins
            kind, values = number, _list_values(data, number, *value)
    return kind, values


def _entry(data, start: int, end: int) -> tuple[str, tuple[int, list]]:
    """A map entry, its fields in any order."""
    name, feature = b"", (BYTES_LIST, [])
    for number, wire, value in _fields(data, start, end):
        if number == 1 and wire == _LEN:
            name = bytes(data[value[0]:value[1]])
        elif number == 2 and wire == _LEN:
            feature = _feature_value(data, *value)
    return name.decode("utf-8", "surrogateescape"), feature


def _usual_example(data, position: int, end: int) -> dict[str, tuple[int, list]] | None:
    """An Example laid out as writers lay it out (each map entry its name, then a Feature
    of one list of one bytes value or of packed numbers), read in one flat pass with
    one-byte lengths read inline: the reader's hot loop. None for any other layout,
    which `_fields` then reads. `data` holds the record's CRC past `end`."""
    if data[position] != 0x0A:
        return None
    size, position = _read_varint(data, position + 1, end)
    if position + size != end:
        return None
    features = {}
    while position < end:
        size = data[position + 1]  # a map entry
        if data[position] != 0x0A:
            return None
        position += 2
        if size >= 0x80:
            size, position = _read_varint(data, position - 1, end)
        entry_end = position + size
        size = data[position + 1]  # its name
        name_end = position + 2 + size
        if entry_end > end or size >= 0x80 or name_end + 4 > entry_end \
                or data[position] != 0x0A or data[name_end] != 0x12:
            return None
        name = data[position + 2:name_end]
        size = data[name_end + 1]  # its Feature
        position = name_end + 2
        if size >= 0x80:
            size, position = _read_varint(data, position - 1, end)
        if position + size != entry_end:
            return None
        tag, size = data[position], data[position + 1]  # the Feature's list
        position += 2
        if size >= 0x80:
            size, position = _read_varint(data, position - 1, end)
        if position + size != entry_end or data[position] != 0x0A or tag not in _USUAL_KINDS:
            return None
        size = data[position + 1]  # the list's values
        position += 2
        if size >= 0x80:
            size, position = _read_varint(data, position - 1, end)
        if position + size != entry_end:
            return None
        features[name.decode("utf-8", "surrogateescape")] = (_USUAL_KINDS[tag], [
            data[position:entry_end]] if tag != 0x1A else _packed_int64(data, position,
                                                                          entry_end))
        position = entry_end
    return features


_USUAL_KINDS = {tag[0]: kind for kind, tag in _KIND_TAG.items()}


def _packed_int64(data, position: int, end: int) -> list[int]:
    values = []
    while position < end:
        number, position = _read_varint(data, position, end)
        values.append(_signed(number))
    return values


def decode_example(data, start: int, end: int) -> dict[str, tuple[int, list]]:
    """The features of the Example in data[start:end]: name -> (kind, values). `data`
    is bytes, so that a slice of it is bytes."""
    usual = _usual_example(data, start, end)
    if usual is not None:
        return usual
    features = {}
    for number, wire, span in _fields(data, start, end):
        if number != 1 or wire != _LEN:
            continue
        for entry_number, entry_wire, entry in _fields(data, *span):
            if entry_number == 1 and entry_wire == _LEN:
                name, feature = _entry(data, *entry)
                features[name] = feature
    return features
