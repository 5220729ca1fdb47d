"""Decoding samples in the loader's workers.

`decode="rgb8"` turns every image field (any raster format Pillow opens: JPEG, PNG,
TIFF, TGA, ICO, PSD, JPEG 2000, PCX, PPM, ...; and the uint8 pixels `packer pack
--encode raw` stores in `rgb.npy`) into a uint8 tensor (3, H, W): EXIF
orientation applied; grayscale, palette, CMYK, RGBA and 16-bit images brought to
8-bit RGB (16-bit scaled down by 256, not clipped); resized to `image_size` when
given, so images of different sizes stack into one batch. `decode="pil"` gives
the same as a PIL image, `decode="raw"` leaves the bytes (stored pixels: their .npy
file, as packed, in every format). `npy` becomes a tensor,
`cls` an int, `json` a parsed object, `txt` a str; other fields stay bytes unless
a decoder for them is passed.
"""

import io
import json
from collections.abc import Callable

import numpy as np
import torch

from packer.read.resize import resized_tensor
from packer.sample import KEY, PIL_FORMATS, RAW_IMAGE_FIELD, field_bytes

DECODE_MODES = ("rgb8", "pil", "raw")
IMAGE_FIELDS = frozenset(PIL_FORMATS)  # every raster format Pillow opens
# Encoded images are decoded in packer.read.pixels, imported only where a dataset has
# them (`preload`), so that reading bytes or stored pixels never imports Pillow.


def preload(mode: str, fields) -> None:
    """Import the Pillow side now (in the training process, before workers fork, which
    then share it) when `mode` decodes images and one of `fields` is encoded."""
    if mode != "raw" and any(field_kind(name) in IMAGE_FIELDS for name in fields):
        from packer.read import pixels  # noqa: F401


def _size(image_size) -> tuple[int, int] | None:
    """`image_size` as (height, width): an int means a square."""
    if image_size is None:
        return None
    if isinstance(image_size, int):
        return image_size, image_size
    height, width = image_size
    return int(height), int(width)


_NPY_LAYOUTS: dict[bytes, tuple[np.dtype, tuple[int, ...], int]] = {}


def npy_array(data) -> np.ndarray:
    """The array of a .npy file's bytes (read-only, sharing `data`): the header of a
    layout seen before is not parsed again. A ValueError where the header's shape does
    not account for every byte after it (a damaged header that still parses)."""
    if isinstance(data, np.ndarray):
        return data
    end = 10 + int.from_bytes(data[8:10], "little")  # a version 1.0 header
    header = bytes(data[:end])
    layout = _NPY_LAYOUTS.get(header)
    if layout is None:
        array = np.load(io.BytesIO(data), allow_pickle=False)
        if data[6:7] != b"\x01" or array.dtype.hasobject or not array.flags.c_contiguous:
            return array
        layout = _NPY_LAYOUTS[header] = (array.dtype, array.shape, array.size)
    dtype, shape, count = layout
    if len(data) - end != count * dtype.itemsize:
        raise ValueError(f"a .npy file whose header says {'x'.join(map(str, shape))} "
                         f"{dtype} ({count * dtype.itemsize:,} bytes) holds "
                         f"{len(data) - end:,} bytes of data: damaged")
    return np.frombuffer(data, dtype, count=count, offset=end).reshape(shape)


def field_kind(name: str) -> str:
    return name.rsplit(".", 1)[-1].lower()


class Decoder:
    """Decodes one sample dict; picklable, so it travels to spawned workers."""

    def __init__(self, mode: str = "rgb8", image_size=None,
                 decoders: dict[str, Callable] | None = None, image_key: str | None = None,
                 exact_resize: bool = False):
        if mode not in DECODE_MODES:
            raise ValueError(f"decode={mode!r}: use one of {', '.join(DECODE_MODES)}")
        self.mode, self.size, self.decoders = mode, _size(image_size), decoders or {}
        self.reduced = not exact_resize  # JPEGs decoded at a reduced scale where it covers
        self.arrays = False  # rgb8 images as (H, W, 3) arrays, for packer.read.collate
        self.image_key = image_key  # every image field is renamed to this, when given

    def field(self, name: str, value):
        if name in self.decoders:
            return self.decoders[name](value)
        if isinstance(value, int):
            return value
        if name == RAW_IMAGE_FIELD and self.mode == "raw":  # its .npy file, as packed
            return field_bytes(value) if isinstance(value, np.ndarray) else value  # (HDF5)
        if name == RAW_IMAGE_FIELD:
            return self.pixels(value)
        if isinstance(value, np.ndarray):
            return torch.from_numpy(value)
        kind = field_kind(name)
        if kind in IMAGE_FIELDS:
            if self.mode == "raw":
                return value
            from packer.images import decode_image
            from packer.read.pixels import rgb8_tensor

            if self.mode == "rgb8":
                pixels = rgb8_tensor(value, self.size, kind, self.reduced, self.arrays)
                return pixels.permute(1, 2, 0) if self.arrays else pixels
            return decode_image(value, self.size, kind, reduced=self.reduced)
        if kind == "cls":
            return int(value)
        if kind == "npy":
            return torch.from_numpy(np.load(io.BytesIO(value), allow_pickle=False))
        if kind == "json":
            return json.loads(value)
        if kind == "txt":
            return value.decode("utf-8")
        return value

    def pixels(self, value):
        """Stored uint8 pixels (height, width, 3) as the decode mode gives images (a
        tensor, or a PIL image)."""
        array = npy_array(value)
        if self.mode == "pil":
            from PIL import Image

            image = Image.fromarray(array)
            size = self.size and (self.size[1], self.size[0])
            return image if not size or image.size == size else image.resize(size,
                                                                              Image.BILINEAR)
        if self.arrays and (self.size is None or array.shape[:2] == self.size):
            return array
        pixels = torch.from_numpy(array.copy() if not array.flags.writeable else array)
        pixels = resized_tensor(pixels.permute(2, 0, 1), self.size, self.arrays)
        return pixels.permute(1, 2, 0) if self.arrays else pixels

    def __call__(self, sample: dict) -> dict:
        decoded = {name: value if name == KEY else self.field(name, value)
                   for name, value in sample.items()}
        if self.image_key:
            images = [name for name in decoded if is_image_field(name)]
            if len(images) == 1:
                decoded[self.image_key] = decoded.pop(images[0])
        return decoded


def is_image_field(name: str) -> bool:
    """Whether a field holds an image: encoded (by its extension) or stored pixels."""
    return name == RAW_IMAGE_FIELD or field_kind(name) in IMAGE_FIELDS


def image_field(source) -> str | None:
    """The key images come under: the dataset's image field; or "image" when samples
    of one image each use several (jpg and png, or jpg and JPG), so that every sample
    has the same keys; None when samples hold several images (image + mask pairs)."""
    counts, samples = source.field_counts()
    names = [name for name in counts if is_image_field(name)]
    if len(names) == 1:
        return names[0]
    one_each = sum(counts[name] for name in names) <= samples
    return "image" if names and one_each else None
