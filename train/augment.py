"""Augmentation on whole batches, on the device, so the loader's workers only decode."""

import torch
import torch.nn.functional as F


def augment_images(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Random resized crop (scale 0.6 to 1), horizontal flip and brightness/contrast
    jitter, drawn per image from `generator` (on the CPU, so the draws are the same
    on every device)."""
    count = images.shape[0]

    def uniform(low: float, high: float) -> torch.Tensor:
        values = torch.rand(count, generator=generator) * (high - low) + low
        return values.to(images.device)

    scale = uniform(0.6, 1.0).sqrt()
    flip = torch.where(uniform(0, 1) < 0.5, -1.0, 1.0)
    shift_x, shift_y = (uniform(-1, 1) * (1 - scale), uniform(-1, 1) * (1 - scale))
    theta = torch.zeros(count, 2, 3, device=images.device)
    theta[:, 0, 0], theta[:, 0, 2] = scale * flip, shift_x
    theta[:, 1, 1], theta[:, 1, 2] = scale, shift_y
    grid = F.affine_grid(theta, list(images.shape), align_corners=False)
    images = F.grid_sample(images, grid.to(images.dtype), mode="bilinear",
                           padding_mode="reflection", align_corners=False)
    brightness = uniform(-0.2, 0.2).view(-1, 1, 1, 1)
    contrast = uniform(0.8, 1.2).view(-1, 1, 1, 1)
    mean = images.mean(dim=(1, 2, 3), keepdim=True)
    return (images - mean) * contrast + mean + brightness
