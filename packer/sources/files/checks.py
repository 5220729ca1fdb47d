"""Checks that an input file is what its name says, before it is packed.

`check_input` returns the reason a file must be skipped (None for a good file) and
what its decoder said of it. The cheap check (`header`) looks at the signature and
the end marker of an image and parses small `.json` and `.cls` files; `decode` also
decodes every image, and the decode decides: a file that the header check doubts
but Pillow decodes is packed, the doubt listed among its warnings.
"""

import json
import os
import sys
import tempfile
import warnings
from collections import Counter
from contextlib import contextmanager

from packer.sample import PIL_FORMATS

CHECK_MODES = ("header", "decode", "none")


def _hex(data: bytes) -> str:
    return data[:8].hex(" ").upper() or "nothing"


def _check_jpeg(data: bytes) -> str | None:
    if not data.startswith(b"\xff\xd8\xff"):
        return f"not a JPEG: starts with {_hex(data)}, expected FF D8 FF"
    # The image's end-of-image marker follows its last start-of-scan; an EOI that
    # only precedes it belongs to an embedded thumbnail, so the file is cut.
    end = data.rfind(b"\xff\xd9")
    if end < 0 or data.find(b"\xff\xda", end) >= 0:  # (searching from the end only)
        return "truncated JPEG: no end-of-image marker (FF D9) after the image data"
    return None


def _check_png(data: bytes) -> str | None:
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        return f"not a PNG: starts with {_hex(data)}, expected 89 50 4E 47"
    if data.rfind(b"IEND\xaeB`\x82") < 0:
        return "truncated PNG: no IEND chunk at the end"
    return None


def _check_gif(data: bytes) -> str | None:
    if data[:6] not in (b"GIF87a", b"GIF89a"):
        return f"not a GIF: starts with {_hex(data)}"
    if not data.rstrip(b"\0").endswith(b";"):
        return "truncated GIF: no trailer byte (3B) at the end"
    return None


def _check_webp(data: bytes) -> str | None:
    if data[:4] != b"RIFF" or data[8:12] != b"WEBP":
        return f"not a WebP: starts with {_hex(data)}"
    declared = int.from_bytes(data[4:8], "little") + 8
    if declared > len(data):
        return f"truncated WebP: the header says {declared} bytes, the file has {len(data)}"
    return None


def _check_bmp(data: bytes) -> str | None:
    if data[:2] != b"BM":
        return f"not a BMP: starts with {_hex(data)}"
    declared = int.from_bytes(data[2:6], "little")
    if declared > len(data):
        return f"truncated BMP: the header says {declared} bytes, the file has {len(data)}"
    return None


# Classic TIFF (42) and BigTIFF (43), in either byte order, and the two classic ones
# with the number in the other byte order, which Pillow reads too. Every signature
# checked here is one Pillow accepts, so a file failing it cannot be decoded either.
_TIFF_SIGNATURES = (b"II*\0", b"MM\0*", b"II+\0", b"MM\0+", b"MM*\0", b"II\0*")


def _check_tiff(data: bytes) -> str | None:
    if data[:4] not in _TIFF_SIGNATURES:
        return f"not a TIFF: starts with {_hex(data)}, expected 49 49 2A 00 or 4D 4D 00 2A " \
               "(or a BigTIFF's 2B)"
    return None


def _check_json(data: bytes) -> str | None:
    try:
        json.loads(data)
    except (UnicodeDecodeError, ValueError) as err:
        return f"invalid JSON: {err}"
    return None


def _check_cls(data: bytes) -> str | None:
    try:
        int(data.strip())
    except ValueError:
        return f"not an integer class id: {data[:20]!r}"
    return None


_CHEAP_CHECKS = {
    "jpg": _check_jpeg, "jpeg": _check_jpeg, "jpe": _check_jpeg, "jfif": _check_jpeg,
    "mpo": _check_jpeg, "png": _check_png, "apng": _check_png, "gif": _check_gif,
    "webp": _check_webp, "bmp": _check_bmp, "tif": _check_tiff, "tiff": _check_tiff,
    "json": _check_json, "cls": _check_cls,
}


MAX_WARNINGS = 10  # distinct decoder messages kept per file


@contextmanager
def decoder_messages(messages: list[str]):
    """Collect into `messages` what decoders say of a file during the block (which may
    raise): Python warnings (not Pillow's deprecations, which are of no file), and what
    C libraries (libtiff) write to the process's stderr, which names no file.
    Meanwhile this process's stderr goes to a spool file."""
    spool = _spool()
    sys.stderr.flush()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        saved = os.dup(2)  # anew each time: whoever owns stderr may have replaced it
        os.dup2(spool, 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            messages += [str(warning.message) for warning in caught
                         if not issubclass(warning.category, DeprecationWarning)]
            messages += _spooled(spool)


def _spooled(spool: int) -> list[str]:
    """The lines written to the spool file since it was last emptied; it is emptied."""
    written = os.lseek(spool, 0, os.SEEK_CUR)
    if not written:
        return []
    text = os.pread(spool, written, 0).decode("utf-8", "replace")
    os.ftruncate(spool, 0)
    os.lseek(spool, 0, os.SEEK_SET)
    return [line.strip() for line in text.splitlines() if line.strip()]


_SPOOLS: dict[int, int] = {}  # process id -> the file descriptor of its spool file


def _spool() -> int:
    """This process's spool file for stderr (a forked worker makes its own)."""
    if os.getpid() not in _SPOOLS:
        with tempfile.TemporaryFile() as file:  # the duplicate outlives it, unnamed
            _SPOOLS[os.getpid()] = os.dup(file.fileno())
    return _SPOOLS[os.getpid()]


def summarised(messages: list[str]) -> list[str]:
    """Distinct messages in order of first appearance, a repeated one with its count."""
    counts = Counter(messages)
    texts = [text if counts[text] == 1 else f"{text} ({counts[text]} times)"
             for text in dict.fromkeys(messages)]
    more = len(texts) - MAX_WARNINGS
    return texts[:MAX_WARNINGS] + ([f"... and {more} more"] if more > 0 else [])


def _decode_image(data: bytes, kind: str, messages: list[str]) -> str | None:
    """Why `data` cannot be decoded as a `kind` image the way the loader decodes it
    (packer.images: libjpeg-turbo or Pillow, the EXIF orientation applied, brought to
    8-bit RGB), or None; what the decoders said goes to `messages` (or, when it fails,
    into the reason)."""
    import PIL
    from PIL import Image

    from packer.images import decoded_pixels

    name, said = PIL_FORMATS[kind], []
    if name not in Image.OPEN:
        Image.init()  # the plugins beyond the common five
    if name not in Image.OPEN:
        return f"Pillow {PIL.__version__} here has no {name} decoder"
    try:
        with decoder_messages(said):
            decoded_pixels(data, None, kind)
    except Exception as err:  # PIL raises many types for bad data; each is a skip reason
        detail = f" ({'; '.join(summarised(said))})" if said else ""
        return f"cannot decode the image: {err}{detail}"
    messages += said
    return None


def check_head(field: str, head: bytes, mode: str) -> str | None:
    """The reason to skip a big file that its first bytes already give (a wrong
    signature), so that it is never read whole; None when the rest must be read."""
    check = _CHEAP_CHECKS.get(field.lower())
    if mode == "none" or check is None or field.lower() in ("json", "cls"):
        return None
    reason = check(head)
    return reason if reason and reason.startswith("not a") else None  # end checks need it all


def check_input(field: str, data: bytes, mode: str) -> tuple[str | None, list[str]]:
    """The reason to skip `data` as a file of type `field` (None for a good file), and
    the warnings of a good one: its decoder's messages, and a header doubt that a
    successful decode overruled."""
    if not data:
        return "empty file (0 bytes)", []
    kind = field.lower()
    check = _CHEAP_CHECKS.get(kind) if mode != "none" else None
    reason = check(data) if check else None
    if mode != "decode" or kind not in PIL_FORMATS:
        return reason, []
    messages: list[str] = []
    decode_reason = _decode_image(data, kind, messages)
    if decode_reason:
        return reason or decode_reason, []  # the header's reason is the more telling
    if reason:
        messages.insert(0, f"{reason}; Pillow decodes it")
    return None, summarised(messages)


def check_file(field: str, data: bytes, mode: str) -> str | None:
    """None if `data` is a good file of type `field`, else the reason to skip it."""
    return check_input(field, data, mode)[0]
