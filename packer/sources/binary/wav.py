"""A sound written back as a WAV file, from its samples (`sample.npy`) and its header
(`audio.json`), as `packer unpack` gives back a folder of WAV files that was packed.

The file is the canonical layout (RIFF, a 16-byte fmt chunk, the data chunk): the
samples are the source's, bit for bit; chunks the source had beside them (LIST, fact,
cue) are not kept. 24-bit samples, widened to int32 when read, are written as 3 bytes.
"""

import struct

import numpy as np

_PCM, _FLOAT = 1, 3


def wav_bytes(values: np.ndarray, header: dict) -> bytes:
    """The WAV file of `values` ((frames,) or (frames, channels)) at `header`'s rate and
    bits (an audio.json: sample_rate, channels, bits, format)."""
    frames = values.reshape(len(values), -1)
    channels, bits = frames.shape[1], int(header["bits"])
    if header["format"] == "float":
        data = frames.astype(f"<f{bits // 8}").tobytes()
    elif bits == 24:
        wide = frames.astype("<i4").view(np.uint8).reshape(-1, 4)
        data = wide[:, :3].tobytes()  # the low three bytes of each little-endian int32
    else:
        data = frames.astype({8: "u1", 16: "<i2", 32: "<i4"}[bits]).tobytes()
    rate, align = int(round(header["sample_rate"])), channels * bits // 8
    fmt = struct.pack("<HHIIHH", _FLOAT if header["format"] == "float" else _PCM, channels,
                      rate, rate * align, align, bits)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack(
        "<I", len(data)) + data + (b"\0" if len(data) % 2 else b"")
    return b"RIFF" + struct.pack("<I", len(body)) + body
