"""Resizing uint8 image tensors in the loader: the antialiased bilinear filter of PIL,
in torch's implementation (within 1 of 255 when shrinking, 2 when enlarging)."""

import torch
import torch.nn.functional as F


def resized_tensor(pixels: torch.Tensor, size: tuple[int, int] | None,
                   channels_last: bool = False) -> torch.Tensor:
    """A uint8 (3, H, W) tensor at `size`, with the antialiased bilinear filter; its
    memory laid out (H, W, 3) with `channels_last`, else contiguous."""
    if size is None or tuple(pixels.shape[1:]) == size:
        return pixels
    if channels_last:
        out = torch.empty((*size, 3), dtype=torch.uint8).permute(2, 0, 1)
    else:
        out = torch.empty((3, *size), dtype=torch.uint8)
    if channels_last != pixels.permute(1, 2, 0).is_contiguous():  # the kernel wants alike
        pixels = (pixels.permute(1, 2, 0).contiguous().permute(2, 0, 1) if channels_last
                  else pixels.contiguous())
    if _RESIZE_KERNEL is None:
        out[None].copy_(F.interpolate(pixels[None], size=size, mode="bilinear", antialias=True))
    else:
        _RESIZE_KERNEL(pixels[None], size, False, out=out[None])
    return out


# F.interpolate(mode="bilinear", antialias=True)'s own kernel, called without its argument
# handling (a third of the time on a small image); a torch without it takes F.interpolate
_RESIZE_KERNEL = getattr(torch._C._nn, "_upsample_bilinear2d_aa", None)
