"""Chunked audio files (RIFF WAV, AIFF/AIFC): each file's own layout, read from its chunks.

Fixed offsets cannot describe a chunked file: a LIST or fact chunk before the samples
moves them. `file_spec(path, size, spec)` walks the chunk headers (seeking past each
chunk's body, so only a few dozen bytes are read), checks the format chunk, and
returns a plain Spec for this one file: the header fields at the offsets where this
file has them, one record per frame (`sample`, one value per channel: shape [channels],
or a scalar for mono), the count from the data chunk, and `trailing = "ignore"` for
the chunks after the samples. Everything else (checks, --hex, packing) then reads the
file as any dump.

    RIFF WAV (little-endian; RIFX: big-endian)      AIFF / AIFC (big-endian)
      0  "RIFF" u4 size "WAVE"                        0  "FORM" u4 size "AIFF" | "AIFC"
     12  chunks: id (4 bytes), u4 size, body,        12  chunks, as in RIFF, sizes big-endian:
         padded to an even size:                         "COMM" i2 channels, u4 frames,
         "fmt " u2 format, u2 channels, u4 rate,          i2 sample bits, 80-bit float rate,
                u4 byte rate, u2 block align,             (AIFC) 4-byte compression type
                u2 bits (+ extensible: subformat)     "SSND" u4 offset, u4 block size, samples
         "data" the samples, frame after frame

Samples keep their type: 8-bit WAV is unsigned (u1), 8-bit AIFF signed (i1), 16 and
32 bits i2/i4, float f4/f8; 24-bit samples are widened to int32 (sign-extended: the
same values, full scale +-2**23), as a model wants numbers rather than byte triples.
"""

from pathlib import Path

import numpy as np

from packer.sources.binary.fields import Field
from packer.sources.binary.spec import Layout, Spec

WAV_FORMATS = {1: "PCM", 3: "IEEE float", 0xFFFE: "extensible"}
WAV_TYPES = {(1, 8): "u1", (1, 16): "i2", (1, 24): "i3", (1, 32): "i4", (3, 32): "f4",
             (3, 64): "f8"}
AIFC_TYPES = {b"NONE": ">", b"twos": ">", b"sowt": "<", b"fl32": "f4", b"FL32": "f4",
              b"fl64": "f8", b"FL64": "f8"}
INT_TYPES = {1: "i1", 2: "i2", 3: "i3", 4: "i4"}


class ChunkProblem(Exception):
    """A chunked file that cannot be read as its container: (check name, message)."""


def file_spec(path: Path, size: int, spec: Spec) -> Spec:
    """This file's layout as a plain spec; ChunkProblem when it does not hold together."""
    with open(path, "rb") as file:
        start = file.read(12)
        if spec.container == "riff":
            return _riff_spec(file, start, size, spec)
        return _aiff_spec(file, start, size, spec)


def _field(name: str, type_name: str, offset: int, order: str, shape: tuple = (),
           expect: bytes | None = None, section: str = "header") -> Field:
    if type_name.startswith("bytes"):
        element, shape = np.dtype(np.uint8), shape + (int(type_name[5:]),)
    elif type_name in ("i3", "u3"):
        element, shape = np.dtype(np.uint8), shape + (3,)
    else:
        element = np.dtype(type_name).newbyteorder(order)
    return Field(f"{section}.fields.{name}", name, type_name, offset, shape, element, expect,
                 order)


def _chunks(file, size: int, first: int, order: str, stop: bytes):
    """(id, offset, body size) of each chunk from `first` up to and including `stop`."""
    offset, seen = first, []
    while offset + 8 <= size:
        file.seek(offset)
        head = file.read(8)
        chunk, body = head[:4], int.from_bytes(head[4:], "little" if order == "<" else "big")
        seen.append((chunk, offset, body))
        if chunk == stop:
            break
        offset += 8 + body + (body & 1)
    return seen


def _names(chunks) -> str:
    return ", ".join(f"{c.decode('latin-1')!r} at {o:,}" for c, o, _ in chunks) or "none"


def _missing(kind: str, wanted: str, chunks) -> ChunkProblem:
    return ChunkProblem("chunks", f"no {wanted!r} chunk; the {kind} chunks found: "
                                  f"{_names(chunks)}; the file is cut short or not {kind}")


def _riff_spec(file, start: bytes, size: int, spec: Spec) -> Spec:
    if start[:4] not in (b"RIFF", b"RIFX") or start[8:12] != b"WAVE":
        raise ChunkProblem("riff", f"riff at offset 0: expected 'RIFF' and 'WAVE' at offset 8, "
                                   f"found {start[:4]!r} and {start[8:12]!r}; not a WAV file")
    order = "<" if start[:4] == b"RIFF" else ">"
    chunks = _chunks(file, size, 12, order, b"data")
    ids = {c: (o, n) for c, o, n in chunks}
    if b"fmt " not in ids:
        raise _missing("RIFF", "fmt ", chunks)
    if b"data" not in ids:
        raise _missing("RIFF", "data", chunks)
    fmt, fmt_size = ids[b"fmt "]
    kind, channels = _wav_format(file, fmt, fmt_size, order)
    data, _ = ids[b"data"]
    fields = [_field("riff", "bytes4", 0, order, expect=start[:4]),
              _field("riff_size", "u4", 4, order),
              _field("wave", "bytes4", 8, order, expect=b"WAVE"),
              _field("fmt", "bytes4", fmt, order, expect=b"fmt "),
              _field("fmt_size", "u4", fmt + 4, order),
              _field("audio_format", "u2", fmt + 8, order),
              _field("num_channels", "u2", fmt + 10, order),
              _field("sample_rate", "u4", fmt + 12, order),
              _field("byte_rate", "u4", fmt + 16, order),
              _field("block_align", "u2", fmt + 20, order),
              _field("bits_per_sample", "u2", fmt + 22, order),
              _field("data", "bytes4", data, order, expect=b"data"),
              _field("data_bytes", "u4", data + 4, order)]
    return _plain_spec(spec, order, fields, data + 8, _sample(kind, order, channels),
                       ("header", "data_bytes", "bytes"), ())


def _wav_format(file, fmt: int, fmt_size: int, order: str) -> tuple[str, int]:
    """The sample type and channel count of the format chunk at `fmt`, checked."""
    if fmt_size < 16:
        raise ChunkProblem("fmt", f"fmt_size at offset {fmt + 4}: {fmt_size}, too short for a "
                                  "WAV format chunk (16 bytes or more)")
    file.seek(fmt + 8)
    body = file.read(min(fmt_size, 40))
    u2 = np.dtype(np.uint16).newbyteorder(order)
    audio_format, channels = (int(v) for v in np.frombuffer(body[:4], u2))
    block_align, bits = (int(v) for v in np.frombuffer(body[12:16], u2))
    sample_format = audio_format
    if audio_format == 0xFFFE and len(body) >= 26:
        sample_format = int(np.frombuffer(body[24:26], u2)[0])  # the subformat's first bytes
    kind = WAV_TYPES.get((sample_format, bits))
    if sample_format not in (1, 3):
        raise ChunkProblem("fmt", f"audio_format at offset {fmt + 8}: {audio_format} is not PCM "
                                  "(1), IEEE float (3) or extensible PCM/float (0xFFFE); "
                                  "packer reads uncompressed WAV only")
    if kind is None:
        raise ChunkProblem("fmt", f"bits_per_sample at offset {fmt + 22}: {bits} with "
                                  f"audio_format {audio_format} ({WAV_FORMATS[audio_format]}); "
                                  "packer reads 8, 16, 24 or 32-bit PCM and 32 or 64-bit float")
    _check_channels(fmt + 10, channels)
    _check_frame("block_align", fmt + 20, block_align, channels, bits)
    return kind, channels


def _check_channels(offset: int, channels: int) -> None:
    if channels < 1:
        raise ChunkProblem("channels", f"num_channels at offset {offset}: {channels}; a file "
                                       "has one channel or more")


def _check_frame(name: str, offset: int, found: int, channels: int, bits: int) -> None:
    expected = channels * ((bits + 7) // 8)
    if found != expected:
        raise ChunkProblem("fmt", f"{name} at offset {offset}: expected {expected} ({channels} "
                                  f"channels x {(bits + 7) // 8} bytes), found {found}")


def _sample(kind: str, order: str, channels: int) -> Layout:
    field = _field("sample", kind, 0, order, (channels,) if channels > 1 else (),
                   section="record")
    return Layout("record", field.size, (field,))


def _plain_spec(spec: Spec, order: str, fields: list, data_offset: int, record: Layout,
                count: tuple, derived: tuple) -> Spec:
    fields.sort(key=lambda f: f.offset)
    header = Layout("header", data_offset, tuple(fields))
    byte_order = "little" if order == "<" else "big"
    return Spec(spec.source, byte_order, header, record, *count, "ignore", spec.description,
                None, derived, sample="file")


def _aiff_spec(file, start: bytes, size: int, spec: Spec) -> Spec:
    if start[:4] != b"FORM" or start[8:12] not in (b"AIFF", b"AIFC"):
        raise ChunkProblem("form", f"form at offset 0: expected 'FORM' and 'AIFF' or 'AIFC' at "
                                   f"offset 8, found {start[:4]!r} and {start[8:12]!r}; not an "
                                   "AIFF file")
    chunks = _chunks(file, size, 12, ">", b"SSND")
    ids = {c: (o, n) for c, o, n in chunks}
    for wanted in (b"COMM", b"SSND"):
        if wanted not in ids:
            raise _missing("AIFF", wanted.decode(), chunks)
    comm, comm_size = ids[b"COMM"]
    file.seek(comm + 8)
    body = file.read(min(comm_size, 22))
    if len(body) < 18:
        raise ChunkProblem("COMM", f"comm_size at offset {comm + 4}: {comm_size}, too short "
                                   "for an AIFF COMM chunk (18 bytes or more)")
    channels = int.from_bytes(body[0:2], "big", signed=True)
    bits = int.from_bytes(body[6:8], "big", signed=True)
    kind, order = _aiff_type(start[8:12], body, comm, bits)
    _check_channels(comm + 8, channels)
    ssnd, _ = ids[b"SSND"]
    file.seek(ssnd + 8)
    skip = int.from_bytes(file.read(4), "big")
    fields = [_field("form", "bytes4", 0, ">", expect=b"FORM"),
              _field("form_size", "u4", 4, ">"),
              _field("aiff", "bytes4", 8, ">", expect=start[8:12]),
              _field("comm", "bytes4", comm, ">", expect=b"COMM"),
              _field("comm_size", "u4", comm + 4, ">"),
              _field("num_channels", "i2", comm + 8, ">"),
              _field("num_frames", "u4", comm + 10, ">"),
              _field("sample_size", "i2", comm + 14, ">"),
              _field("sample_rate_80bit", "bytes10", comm + 16, ">"),
              _field("ssnd", "bytes4", ssnd, ">", expect=b"SSND"),
              _field("ssnd_size", "u4", ssnd + 4, ">"),
              _field("ssnd_offset", "u4", ssnd + 8, ">"),
              _field("block_size", "u4", ssnd + 12, ">")]
    if start[8:12] == b"AIFC" and len(body) >= 22:
        fields.append(_field("compression_type", "bytes4", comm + 26, ">"))
    derived = (("sample_rate", extended_float(body[8:18])),)
    return _plain_spec(spec, order, fields, ssnd + 16 + skip, _sample(kind, order, channels),
                       ("header", "num_frames", "records"), derived)


def _aiff_type(form: bytes, body: bytes, comm: int, bits: int) -> tuple[str, str]:
    """The sample type and byte order of an AIFF (big-endian integers) or AIFC file."""
    compression = body[18:22] if form == b"AIFC" else b"NONE"
    if compression not in AIFC_TYPES:
        raise ChunkProblem("COMM", f"compression_type at offset {comm + 26}: {compression!r} is "
                                   "compressed audio; packer reads AIFF and AIFC with NONE, "
                                   "twos, sowt, fl32 or fl64")
    kind = AIFC_TYPES[compression]
    if kind in ("f4", "f8"):
        return kind, ">"
    if not 1 <= bits <= 32:
        raise ChunkProblem("COMM", f"sample_size at offset {comm + 14}: {bits}; AIFF samples "
                                   "have 1 to 32 bits")
    return INT_TYPES[(bits + 7) // 8], kind


def extended_float(raw: bytes) -> float:
    """An 80-bit IEEE 754 extended float (AIFF's sample rate): sign and 15-bit exponent,
    then a 64-bit mantissa whose integer bit is explicit."""
    exponent = int.from_bytes(raw[:2], "big")
    mantissa = int.from_bytes(raw[2:10], "big")
    sign = -1.0 if exponent & 0x8000 else 1.0
    exponent &= 0x7FFF
    if exponent == 0 and mantissa == 0:
        return 0.0
    return sign * mantissa * 2.0 ** (exponent - 16383 - 63)
