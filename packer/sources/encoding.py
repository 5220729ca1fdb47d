"""A text file's encoding (a table, a labels file): UTF-8 when the bytes say so, else
charset-normalizer's guess among the encodings that decode every byte looked at, with
corrections for Chinese text that it cannot tell from Big5, Korean, a Western single-byte
encoding or even UTF-8 on a few characters (a GBK export whose only Chinese is one column
name, as Chinese-language Excel and WPS write them).

The bytes looked at (`encoding_probe`): the first MiB, and for a longer file whole
lines from its middle and its end, so that accented names first met at row 50,000
still decide.
"""

import codecs
from pathlib import Path

import numpy as np

from packer.errors import PackerError

PROBE_BYTES = 256 << 10  # bytes read from the middle and from the end of a longer file
_GB = {"gbk", "gb2312", "gb18030", "hz", "cp936"}


def encoding_probe(file, sample: bytes) -> bytes:
    """`sample` (the file's first bytes) with whole lines from the middle and the end of
    the open binary `file` when it is longer, cut at line ends so no character is split."""
    size = file.seek(0, 2)
    if size <= len(sample) or sample.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return sample
    pieces = [sample[:sample.rfind(b"\n") + 1] or sample]
    for start in sorted({size // 2, max(size - PROBE_BYTES, 0)}):
        if start < len(sample):
            continue
        file.seek(start)
        piece = file.read(PROBE_BYTES)
        first, last = piece.find(b"\n"), piece.rfind(b"\n")
        if 0 <= first < last:
            pieces.append(piece[first + 1:last + 1])
    return b"".join(pieces)


def detect_encoding(path: Path, sample: bytes, final: bool = False) -> str:
    """utf-8 (with or without a BOM) when the bytes decode so, else charset-normalizer's
    best guess among the encodings that decode the whole sample cleanly (it looks at
    chunks spread over the sample), corrected where Chinese text is concerned (see
    `_gb_or_not`); any GB encoding is read as GB18030, the superset of GBK and GB2312."""
    if sample.startswith(codecs.BOM_UTF8):
        return "utf-8-sig"
    if sample.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"
    if _decodes(sample, "utf-8", final):
        return "gb18030" if _stray_utf8(sample) and _reads_as_chinese(sample, final) else "utf-8"
    from charset_normalizer import from_bytes

    steps = max(5, min(DETECT_STEPS, len(sample) // DETECT_CHUNK))
    matches = from_bytes(sample, steps=steps, chunk_size=DETECT_CHUNK)
    chaos = {}  # encoding -> charset-normalizer's mess ratio, for those decoding cleanly
    for match in matches:
        name = _canon(match.encoding)
        if name not in chaos and _decodes(sample, name, final):
            chaos[name] = match.chaos
    if not chaos and _decodes(sample, "gb18030", final):
        chaos = {"gb18030": 1.0}
    if not chaos:
        if not len(matches):
            raise PackerError(f"{path}: cannot tell the text encoding; pass --encoding "
                              "(for example gbk, latin-1, cp1252)")
        return _canon(matches[0].encoding)  # reading names the first byte it cannot decode
    guess = next(iter(chaos))
    if guess not in _DOUBLE_BYTE and guess != "gb18030" and _reads_as_chinese(sample, final):
        return "gb18030"  # over a single-byte Western guess: Æ½¾ù°ë¾¶ is 平均半径
    return _gb_or_not(sample, guess, chaos, final)


DETECT_CHUNK = 4096  # bytes per chunk that charset-normalizer looks at
DETECT_STEPS = 32  # chunks, spread over the sample
_DOUBLE_BYTE = {"big5", "big5hkscs", "cp950", "cp949", "euc_kr", "johab", "euc_jis_2004",
                "euc_jp", "cp932", "shift_jis"}


def _canon(name: str) -> str:
    name = codecs.lookup(name).name
    return "gb18030" if name in _GB else name


def _decodes(sample: bytes, encoding: str, final: bool) -> bool:
    try:
        codecs.getincrementaldecoder(encoding)(errors="strict").decode(sample, final=final)
        return True
    except (UnicodeDecodeError, LookupError):
        return False


def _reads_as_chinese(sample: bytes, final: bool) -> bool:
    """Whether the bytes read as GB18030 give Chinese text: every non-ASCII character a
    CJK ideograph (or CJK punctuation, or a full-width form), at least one ideograph, each
    written as one of GB2312's byte pairs (both bytes 0xA1 or above). Accented Latin text
    rarely does: its accented letters stand beside ASCII ones, which no pair takes."""
    if not _decodes(sample, "gb18030", final):
        return False
    wide = {c for c in sample.decode("gb18030", errors="ignore") if ord(c) > 0x7F}
    if not any(0x3400 <= ord(c) <= 0x9FFF for c in wide):
        return False
    for char in wide:
        code = ord(char)
        if not (0x3400 <= code <= 0x9FFF or 0x3000 <= code <= 0x303F or 0xFF00 <= code <= 0xFFEF):
            return False
        pair = char.encode("gb18030")
        if len(pair) != 2 or min(pair) < 0xA1:
            return False
    return True


def _stray_utf8(sample: bytes) -> bool:
    """Whether the bytes, read as UTF-8, give only letters of no living alphabet: two-byte
    sequences in Latin Extended-B, IPA or the spacing modifiers (U+0180..U+02FF), as a GBK
    character or two do by chance (平 is C6 BD, the UTF-8 of ƽ)."""
    wide = {c for c in sample.decode("utf-8", errors="ignore") if ord(c) > 0x7F}
    return bool(wide) and all(0x180 <= ord(c) <= 0x2FF for c in wide)


def _gb_or_not(sample: bytes, guess: str, chaos: dict, final: bool) -> str:
    """GB18030 instead of another double-byte guess when the text is written in
    GB2312's pairs, as simplified Chinese is. charset-normalizer cannot tell those
    apart on the few characters of a header (`诊断` reads cleanly as big5 and as
    cp949), but the byte pairs can: Big5 puts about 40% of its characters on a second
    byte below 0xA1, which GB2312 never does, and Korean Hangul has first bytes up to
    0xC8 only; where Hangul and Chinese share those, Korean text read as GB18030 looks
    messier to charset-normalizer than Chinese text does."""
    if guess not in _DOUBLE_BYTE or not _decodes(sample, "gb18030", final):
        return guess
    data = np.frombuffer(sample, np.uint8)
    high = np.flatnonzero(data >= 0x80)
    if not high.size:
        return guess
    # The pairs of the GB18030 reading: a high byte opens a pair, its next byte closes it.
    text = sample.decode("gb18030", errors="ignore")
    pairs = np.frombuffer(b"".join(c.encode("gb18030") for c in set(text) if ord(c) > 0x7F
                                   and len(c.encode("gb18030")) == 2), np.uint8).reshape(-1, 2)
    if not len(pairs) or (pairs[:, 1] < 0xA1).any() or (pairs[:, 0] < 0xA1).any():
        return guess
    hangul_only = (pairs[:, 0] <= 0xC8).all()
    korean = guess in ("cp949", "euc_kr", "johab")
    if korean and hangul_only and chaos.get("gb18030", 1.0) > chaos[guess]:
        return guess
    return "gb18030"
