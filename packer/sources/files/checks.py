"""Checks that an input file is what its name says, before it is packed.

`check_file` returns None for a good file, or the reason it must be skipped.
The cheap check (`header`) looks at the signature and the end marker of an image
and parses small `.json` and `.cls` files; `decode` also decodes every image.
"""

import io
import json

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


def _check_tiff(data: bytes) -> str | None:
    if data[:4] not in (b"II*\0", b"MM\0*"):
        return f"not a TIFF: starts with {_hex(data)}"
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
    "jpg": _check_jpeg, "jpeg": _check_jpeg, "png": _check_png, "gif": _check_gif,
    "webp": _check_webp, "bmp": _check_bmp, "tif": _check_tiff, "tiff": _check_tiff,
    "json": _check_json, "cls": _check_cls,
}


PIL_FORMATS = {"jpg": "JPEG", "jpeg": "JPEG", "png": "PNG", "gif": "GIF", "webp": "WEBP",
                "bmp": "BMP", "tif": "TIFF", "tiff": "TIFF"}


def _decode_image(data: bytes, kind: str) -> str | None:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data), formats=[PIL_FORMATS[kind]]) as image:
            image.load()
    except Exception as err:  # PIL raises many types for bad data; each is a skip reason
        return f"cannot decode the image: {err}"
    return None


def check_head(field: str, head: bytes, mode: str) -> str | None:
    """The reason to skip a big file that its first bytes already give (a wrong
    signature), so that it is never read whole; None when the rest must be read."""
    check = _CHEAP_CHECKS.get(field.lower())
    if mode == "none" or check is None or field.lower() in ("json", "cls"):
        return None
    reason = check(head)
    return reason if reason and reason.startswith("not a") else None  # end checks need it all


def check_file(field: str, data: bytes, mode: str) -> str | None:
    """None if `data` is a good file of type `field`, else the reason to skip it."""
    if not data:
        return "empty file (0 bytes)"
    if mode == "none":
        return None
    kind = field.lower()
    check = _CHEAP_CHECKS.get(kind)
    reason = check(data) if check else None
    if reason is None and mode == "decode" and kind in PIL_FORMATS:
        reason = _decode_image(data, kind)
    return reason
