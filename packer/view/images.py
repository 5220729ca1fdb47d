"""Images on a `packer view` page: their size and brightness (read at a reduced scale
where the format allows), thumbnails and full-size pictures as data URIs."""

import base64
import io

from PIL import Image, ImageStat, UnidentifiedImageError

from packer.read.decode import npy_array
from packer.sample import RAW_IMAGE_FIELD

THUMBNAIL = 128  # px, the longer side of a thumbnail
SHOWN_AS_IS = {"JPEG": "image/jpeg", "PNG": "image/png", "GIF": "image/gif",
               "WEBP": "image/webp", "BMP": "image/bmp"}  # formats every browser shows
UNREADABLE = (OSError, ValueError, UnidentifiedImageError, Image.DecompressionBombError)
STAT_SIDE = 32  # px: brightness is measured on the image reduced to about this size


def open_image(name: str, payload: bytes) -> Image.Image:
    """The image of a field: encoded bytes, or stored pixels (`rgb.npy`)."""
    if name == RAW_IMAGE_FIELD:
        return Image.fromarray(npy_array(payload))
    return Image.open(io.BytesIO(payload))


def image_facts(name: str, payload: bytes) -> tuple[int, int, float, int] | None:
    """(width, height, mean grey level, brightest minus darkest grey level) of an
    image; None when it does not open. A JPEG is decoded at a reduced scale (its DCT
    scaling), which keeps a pass over every image of a dataset fast."""
    try:
        image = open_image(name, payload)
        width, height = image.size
        image.draft("L", (max(1, width // 8), max(1, height // 8)))
        grey = image.convert("L")
        grey.thumbnail((STAT_SIDE, STAT_SIDE))
        stat = ImageStat.Stat(grey)
    except UNREADABLE:
        return None
    darkest, brightest = stat.extrema[0]
    return width, height, stat.mean[0], brightest - darkest


def thumbnail_uri(name: str, payload: bytes) -> str | None:
    """A JPEG thumbnail (at most THUMBNAIL px a side) as a data URI; None when the
    image does not open."""
    try:
        image = open_image(name, payload)
        image.draft("RGB", (THUMBNAIL, THUMBNAIL))
        image = _rgb(image)
        image.thumbnail((THUMBNAIL, THUMBNAIL))
    except UNREADABLE:
        return None
    return data_uri(_encoded(image, "JPEG"), "image/jpeg")


def full_uri(name: str, payload: bytes) -> str | None:
    """The image at full size as a data URI: its own bytes where browsers show the
    format, else converted to PNG; None when it does not open."""
    try:
        image = open_image(name, payload)
        if name != RAW_IMAGE_FIELD and image.format in SHOWN_AS_IS:
            return data_uri(payload, SHOWN_AS_IS[image.format])
        return data_uri(_encoded(_rgb(image), "PNG"), "image/png")
    except UNREADABLE:
        return None


def data_uri(payload: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(payload).decode('ascii')}"


def _rgb(image: Image.Image) -> Image.Image:
    return image if image.mode == "RGB" else image.convert("RGB")


def _encoded(image: Image.Image, fmt: str) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, quality=85) if fmt == "JPEG" else image.save(out, fmt)
    return out.getvalue()
