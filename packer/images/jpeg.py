"""JPEG to RGB pixels through libjpeg-turbo by way of simplejpeg, without a PIL image.

The pixels are Pillow's, bit for bit: the same library decodes (accurate integer IDCT,
smooth chroma upsampling), at the same 1/2, 1/4 or 1/8 scale that Pillow's `draft`
picks, and the EXIF orientation is applied the way `ImageOps.exif_transpose` applies
it. What it saves is Pillow's per-image work around the decode (opening the image,
parsing its markers and EXIF, converting modes): half of a small JPEG's time. The
decode releases the GIL, so threads decode in parallel.

JPEGs it cannot give as Pillow would (CMYK and YCCK), and those libjpeg-turbo rejects,
come back as None: the caller decodes them with Pillow, which converts or raises as it
always has.
"""

import numpy as np
import simplejpeg
from PIL import Image

_RGB_SOURCES = frozenset({"YCbCr", "Gray", "RGB"})  # libjpeg-turbo converts these to RGB
_EXIF_ORIENTATION = 0x0112
_EXIF_SEGMENT = b"Exif\x00\x00"
_START_OF_SCAN = 0xDA
_TRANSPOSE = {  # EXIF orientation -> what makes the image upright (as ImageOps does)
    2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM, 5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270, 7: Image.Transpose.TRANSVERSE, 8: Image.Transpose.ROTATE_90,
}


def draft_scale(height: int, width: int, side: int | None) -> int:
    """The denominator Pillow's draft decodes at for a target of `side` on both sides:
    the largest of 8, 4, 2 that keeps both sides at or above it, else 1."""
    if not side:
        return 1
    fits = min(width // side, height // side)
    return next((scale for scale in (8, 4, 2) if fits >= scale), 1)


def exif_orientation(data) -> int:
    """The orientation in a JPEG's first APP1 Exif segment, 1 when there is none: the
    markers before the scan are walked, and only an Exif segment is parsed."""
    position, end = 2, len(data)
    while position + 4 <= end and data[position] == 0xFF:
        marker = data[position + 1]
        if marker == 0xFF:  # a fill byte
            position += 1
            continue
        if marker == _START_OF_SCAN:
            break
        length = int.from_bytes(data[position + 2:position + 4], "big")
        if marker == 0xE1 and data[position + 4:position + 10] == _EXIF_SEGMENT:
            exif = Image.Exif()
            exif.load(bytes(data[position + 4:position + 2 + length]))
            return exif.get(_EXIF_ORIENTATION, 1)
        position += 2 + length
    return 1


def jpeg_rgb(data, side: int | None) -> np.ndarray | None:
    """A JPEG's upright (H, W, 3) uint8 pixels, decoded at a reduced scale where that
    still covers `side` (None: full size); None where Pillow has to decode it."""
    try:
        height, width, colorspace, _ = simplejpeg.decode_jpeg_header(data)
        if colorspace not in _RGB_SOURCES:
            return None
        scale = draft_scale(height, width, side)
        pixels = simplejpeg.decode_jpeg(data, "rgb", min_height=-(-height // scale),
                                        min_width=-(-width // scale))
    except ValueError:  # not a JPEG libjpeg-turbo takes, or a damaged one
        return None
    orientation = exif_orientation(data)
    if orientation in _TRANSPOSE:
        pixels = np.array(Image.fromarray(pixels).transpose(_TRANSPOSE[orientation]))
    return pixels
