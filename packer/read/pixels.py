"""Encoded images to uint8 tensors for the loader: decoded by packer.images, resized by
packer.read.resize. Imported where a dataset has encoded images (decode.preload), so
that reading bytes or stored pixels never imports Pillow."""

import torch

from packer.images import decoded_pixels
from packer.read.resize import resized_tensor


def rgb8_tensor(data: bytes, size: tuple[int, int] | None, kind: str | None = None,
                reduced: bool = True, channels_last: bool = False) -> torch.Tensor:
    """Bytes to a uint8 (3, H, W) tensor, resized to `size` if given. torch resizes
    with the same antialiased bilinear filter as PIL (within 1 of 255 when shrinking,
    2 when enlarging), in half the time. A JPEG at least twice the target's size is
    decoded at a reduced scale first (`reduced`; README: how far that differs). With
    `channels_last` the tensor lies over (H, W, 3) memory, as a batch's rows do."""
    pixels = torch.from_numpy(decoded_pixels(data, size, kind, reduced)).permute(2, 0, 1)
    return resized_tensor(pixels, size, channels_last)
