"""WAV and AIFF files written byte by byte for the tests (wave writes PCM WAV only;
AIFF's writer, aifc, left the standard library in Python 3.13)."""

import io
import math
import struct
import wave

import numpy as np


def pcm_frames(frames: int, channels: int, bits: int, seed: int = 0) -> np.ndarray:
    """Integer samples (frames, channels) spanning the range of `bits`-bit PCM."""
    rng = np.random.default_rng(seed)
    if bits == 8:  # WAV's 8-bit PCM is unsigned
        return rng.integers(0, 256, (frames, channels)).astype(np.int64)
    top = 2 ** (bits - 1)
    values = rng.integers(-top, top, (frames, channels)).astype(np.int64)
    values[0, 0], values[-1, -1] = -top, top - 1  # the extremes, for the sign extension
    return values


def sample_bytes(values: np.ndarray, bits: int, order: str = "little") -> bytes:
    width = bits // 8
    return b"".join(int(v).to_bytes(width, order, signed=bits > 8 or order == "big")
                    for v in values.ravel())


def chunk(name: bytes, body: bytes, order: str = "<") -> bytes:
    return name + struct.pack(order + "I", len(body)) + body + b"\0" * (len(body) & 1)


def wav_bytes(values: np.ndarray, bits: int, rate: int = 16000, before=(), after=()) -> bytes:
    """A PCM WAV written by the wave module, with extra chunks spliced in before and after
    the data chunk (`before`, `after`: (id, body) pairs)."""
    out = io.BytesIO()
    with wave.open(out, "wb") as file:
        file.setnchannels(values.shape[1])
        file.setsampwidth(bits // 8)
        file.setframerate(rate)
        file.writeframes(sample_bytes(values, bits))
    data = out.getvalue()
    fmt_end = 12 + 8 + 16
    body = data[:fmt_end][12:] + b"".join(chunk(n, b) for n, b in before) + data[fmt_end:]
    body += b"".join(chunk(n, b) for n, b in after)
    return b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WAVE" + body


def float_wav_bytes(values: np.ndarray, rate: int = 16000) -> bytes:
    channels = values.shape[1]
    fmt = struct.pack("<HHIIHH", 3, channels, rate, rate * 4 * channels, 4 * channels, 32)
    body = chunk(b"fmt ", fmt) + chunk(b"fact", struct.pack("<I", len(values)))
    body += chunk(b"data", values.astype("<f4").tobytes())
    return b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WAVE" + body


def extended(rate: float) -> bytes:
    """An 80-bit IEEE extended float, as AIFF stores its sample rate."""
    mantissa, exponent = math.frexp(rate)  # rate = mantissa * 2**exponent, 0.5 <= m < 1
    return struct.pack(">HQ", exponent - 1 + 16383, int(mantissa * 2 ** 64))


def aiff_bytes(values: np.ndarray, bits: int, rate: float = 22050.0,
               compression: bytes | None = None, before=()) -> bytes:
    """AIFF (or AIFC with `compression`) of signed big-endian samples (sowt: little)."""
    frames, channels = values.shape
    comm = struct.pack(">hIh", channels, frames, bits) + extended(rate)
    if compression is not None:
        comm += compression + b"\x0enot compressed\0"
    order = "little" if compression == b"sowt" else "big"
    samples = b"".join(int(v).to_bytes(bits // 8, order, signed=True) for v in values.ravel())
    body = chunk(b"COMM", comm, ">") + b"".join(chunk(n, b, ">") for n, b in before)
    body += chunk(b"SSND", struct.pack(">II", 0, 0) + samples, ">")
    form = b"AIFC" if compression is not None else b"AIFF"
    return b"FORM" + struct.pack(">I", 4 + len(body)) + form + body
