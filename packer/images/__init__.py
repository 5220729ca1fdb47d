"""Encoded images to pixels, without torch: Pillow, and libjpeg-turbo straight for JPEG
(packer.images.jpeg). Packing (its checks and its transform) and reading decode the same
way here, so that an image that packs is an image that reads."""

import io

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from packer.images.jpeg import jpeg_rgb
from packer.sample import PIL_FORMATS

_EXIF_ORIENTATION = 0x0112


def to_rgb8(image: Image.Image) -> Image.Image:
    """An 8-bit RGB image, whatever the mode; 16-bit values are scaled, not clipped."""
    if image.mode in ("I;16", "I;16B", "I;16L", "I;16N", "I"):
        values = np.asarray(image).astype(np.int64)
        gray = (np.clip(values, 0, 65535) >> 8).astype(np.uint8)
        return Image.fromarray(np.stack([gray] * 3, axis=-1))
    if image.mode == "F":
        gray = np.clip(np.asarray(image), 0, 255).astype(np.uint8)
        return Image.fromarray(np.stack([gray] * 3, axis=-1))
    if image.mode == "P" and "transparency" in image.info:
        image = image.convert("RGBA")
    return image if image.mode == "RGB" else image.convert("RGB")


def decode_image(data: bytes, size: tuple[int, int] | None, kind: str | None = None,
                 resize: bool = True, reduced: bool = True) -> Image.Image:
    """Bytes to an upright 8-bit RGB PIL image, resized to (height, width) if given
    (without `resize`, only as far as JPEG's cheap reduced-scale decoding goes; without
    `reduced`, a JPEG is decoded at full size first). `kind` (the field's extension)
    spares PIL from trying every format."""
    hint = PIL_FORMATS.get(kind)
    try:
        image = Image.open(io.BytesIO(data), formats=[hint] if hint else None)
    except (UnidentifiedImageError, KeyError):  # another format, or one this Pillow lacks
        image = Image.open(io.BytesIO(data))
    if reduced and size is not None and image.format == "JPEG":
        # libjpeg's 1/2, 1/4 or 1/8 scale, the smallest that still covers the target on
        # both sides (whichever way EXIF turns it): a fraction of a full decode's time
        side = max(size)
        image.draft("RGB", (side, side))
    if image.getexif().get(_EXIF_ORIENTATION, 1) != 1:
        image = ImageOps.exif_transpose(image)
    image = to_rgb8(image)
    if resize and size is not None and image.size != (size[1], size[0]):
        image = image.resize((size[1], size[0]), Image.BILINEAR)
    return image


def decoded_pixels(data: bytes, size: tuple[int, int] | None, kind: str | None = None,
                   reduced: bool = True) -> np.ndarray:
    """Bytes to upright (H, W, 3) uint8 pixels, not resized: a JPEG through
    libjpeg-turbo straight (`packer.images.jpeg`, the same pixels as Pillow's), at a
    reduced scale that still covers `size` if `reduced`; anything else through Pillow."""
    pixels = None
    if PIL_FORMATS.get(kind) == "JPEG":
        pixels = jpeg_rgb(data, max(size) if reduced and size else None)
    if pixels is None:
        pixels = np.array(decode_image(data, size, kind, resize=False, reduced=reduced))
    return pixels
