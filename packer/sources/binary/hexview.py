"""The bytes of any file, xxd-style, with hints for writing its spec.

Hints: printable strings near the start (a magic, a format name), guesses of the
record size from the byte autocorrelation of a sample of the file, and the sizes
that divide the file size after common header sizes.
"""

from pathlib import Path

import numpy as np

from packer.sources.binary.dump import read_bytes

BYTES_PER_LINE = 16
COMMON_HEADER_SIZES = (0, 16, 32, 44, 64, 128, 256, 512)
STRINGS_SCAN = 512  # bytes at the start searched for strings (a magic, a format name)
MIN_STRING = 4
MAX_STRINGS = 8
SAMPLE_BYTES = 64 * 1024  # bytes from the middle of the file for the stride guess
MIN_SAMPLE = 64
MAX_STRIDE = 4096
MAX_DIVISOR = 4096


def hex_lines(data: bytes, offset: int = 0) -> list[dict]:
    """16 bytes a line: {"offset", "hex" (two groups of 8), "ascii" (. if unprintable)}."""
    lines = []
    for start in range(0, len(data), BYTES_PER_LINE):
        chunk = data[start:start + BYTES_PER_LINE]
        groups = (chunk[:8].hex(" "), chunk[8:].hex(" "))
        lines.append({"offset": offset + start, "hex": "  ".join(g for g in groups if g),
                      "ascii": "".join(chr(b) if 0x20 <= b < 0x7F else "." for b in chunk)})
    return lines


def format_hex_line(line: dict) -> str:
    return f"{line['offset']:08x}  {line['hex']:<48}  |{line['ascii']}|"


def printable_strings(data: bytes, offset: int = 0) -> list[dict]:
    """Runs of at least MIN_STRING printable ASCII bytes: {"offset", "text"}."""
    printable = np.frombuffer(data, dtype=np.uint8)
    printable = (printable >= 0x20) & (printable < 0x7F)
    edges = np.diff(np.concatenate(([0], printable.astype(np.int8), [0])))
    starts, stops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    long_enough = (stops - starts) >= MIN_STRING
    return [{"offset": offset + int(a), "text": data[a:b].decode("ascii")}
            for a, b in zip(starts[long_enough][:MAX_STRINGS], stops[long_enough], strict=False)]


def equal_byte_rates(sample: np.ndarray, max_lag: int) -> np.ndarray:
    """rates[k] = fraction of positions i with sample[i] == sample[i + k], k = 0..max_lag."""
    rates = np.ones(max_lag + 1)
    for lag in range(1, max_lag + 1):
        rates[lag] = np.count_nonzero(sample[:-lag] == sample[lag:]) / (sample.size - lag)
    return rates


def stride_guesses(sample: bytes, top: int = 3) -> list[dict]:
    """Likely record sizes: {"size", "score"}, best first.

    Bytes at the same place in consecutive records (high bytes of counters, float
    exponents, flags, padding) tend to be equal, so the equal-byte rate peaks at
    the record size and its multiples. Each size is scored by the mean rate over
    its multiples, which favours the record size over both its multiples and the
    sizes of its fields."""
    data = np.frombuffer(sample, dtype=np.uint8)
    if data.size < MIN_SAMPLE:
        return []
    max_lag = min(MAX_STRIDE, data.size // 4)
    rates = equal_byte_rates(data, max_lag)
    sizes = np.arange(1, max_lag // 4 + 1)  # at least 4 multiples each, for a stable mean
    scores = np.array([rates[size::size].mean() for size in sizes])
    excess = scores - np.median(scores)
    spread = 1.4826 * np.median(np.abs(excess))  # robust standard deviation
    open_sizes = excess > max(6 * spread, 0.01)  # clearly above the file's background
    guesses = []
    while open_sizes.any() and len(guesses) < top:
        best = int(np.flatnonzero(open_sizes)[np.argmax(excess[open_sizes])])
        # Multiples of the record size score as well as it (the fewer multiples a size
        # has in the sample, the noisier its mean): take the smallest size that divides
        # the best one and scores near it.
        near = open_sizes & (excess >= 0.75 * excess[best]) & (sizes[best] % sizes == 0)
        pick = int(np.flatnonzero(near)[0])
        guesses.append({"size": int(sizes[pick]), "score": round(float(scores[pick]), 3)})
        open_sizes &= sizes % sizes[pick] != 0
    return guesses


def divisors(n: int, limit: int = MAX_DIVISOR) -> list[int]:
    """Sizes from 2 up that split n into at least two equal parts."""
    candidates = np.arange(2, min(limit, n // 2) + 1)
    return candidates[n % candidates == 0].tolist()


def hex_report(path: Path, size: int, offset: int, length: int) -> dict:
    """The hex view of bytes offset..offset+length-1 and the hints, as a dict."""
    shown = read_bytes(path, offset, length)
    sample_start = max(0, (size - SAMPLE_BYTES) // 2)
    guesses = stride_guesses(read_bytes(path, sample_start, SAMPLE_BYTES))
    for guess in guesses:
        guess["fits"] = [{"header": h, "records": (size - h) // guess["size"]}
                         for h in COMMON_HEADER_SIZES
                         if h < size and (size - h) % guess["size"] == 0]
    return {"mode": "hex", "file": str(path), "size": size, "offset": offset,
            "length": len(shown), "lines": hex_lines(shown, offset),
            "strings": printable_strings(read_bytes(path, 0, STRINGS_SCAN)),
            "stride_guesses": guesses,
            "divisors": {str(h): divisors(size - h) for h in COMMON_HEADER_SIZES if h < size},
            "ok": True}


def render_hex_report(report: dict) -> str:
    first, count = report["offset"], report["length"]
    compressed = f" ({report['compression']}, decompressed)" if report.get("compression") else ""
    lines = [f"{report['file']}: {report['size']:,} bytes{compressed}; bytes {first:,}.."
             f"{first + count - 1:,} "
             f"shown (0x{first:x}..0x{first + count - 1:x})", ""]
    lines += [format_hex_line(line) for line in report["lines"]]
    lines += ["", "hints for writing a spec:"]
    strings = ", ".join(f"0x{s['offset']:x} {s['text']!r}" for s in report["strings"])
    lines.append(f"  strings in the first {STRINGS_SCAN:,} bytes: {strings or 'none'}")
    lines.append("  record size guesses (byte autocorrelation): "
                 + ("; ".join(_guess_text(g) for g in report["stride_guesses"])
                    or "none (too few bytes, or no repeating pattern)"))
    lines.append("  sizes that divide what follows a header of:")
    for header, sizes in report["divisors"].items():
        rest = report["size"] - int(header)
        shown = " ".join(map(str, sizes[:24])) + (" ..." if len(sizes) > 24 else "")
        lines.append(f"    {header:>3} bytes ({rest:,} left): {shown or 'none'}")
    return "\n".join(lines)


def _guess_text(guess: dict) -> str:
    fits = ", ".join(f"{f['header']} + {f['records']:,} x {guess['size']}" for f in guess["fits"])
    return f"{guess['size']} (score {guess['score']:.2f}" + (f"; fits {fits})" if fits else ")")
