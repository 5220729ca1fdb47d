"""Augmentation on whole batches, on the device, so the loader's workers only decode.

Policies (`--augment`), drawn per image:

    none    the images as they are
    light   a crop keeping 80 to 100% of the image, moved within it (no flips: a
            flipped digit or letter is another symbol), brightness and contrast +-10%
    flip    light, and a horizontal flip half of the time
    strong  a crop keeping 50 to 100%, flips, brightness and contrast +-20%
    randaugment, trivialaugment
            torchvision.transforms.v2's RandAugment (two of its 14 operations at
            magnitude 9) and TrivialAugmentWide (one, at a random magnitude): rotations,
            shears, colour, posterize, solarize ... drawn per image, on the images
            mapped back to [0, 1], seeded from the run's generator

`--random-erasing P` then blanks a random box of each image with probability P
(torchvision's RandomErasing, the box set to the mean: CutOut).

MixUp and CutMix (`--mixup ALPHA`, `--cutmix ALPHA`) mix each batch with itself in a
shuffled order: with lam drawn from Beta(ALPHA, ALPHA), inputs become lam * own +
(1 - lam) * partner's (MixUp) or the partner's pixels in a box covering 1 - lam of the
image (CutMix, lam then the share of pixels kept), and the targets become lam * own
one-hot + (1 - lam) * partner's one-hot. Given both, each batch takes one of the two.
"""

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Policy:
    min_area: float  # the smallest share of the image a crop keeps
    flip: bool
    jitter: float  # brightness shift and contrast change, +-


POLICIES = {"light": Policy(0.8, False, 0.1), "flip": Policy(0.8, True, 0.1),
            "strong": Policy(0.5, True, 0.2)}


LIBRARY = ("randaugment", "trivialaugment")  # torchvision.transforms.v2's, drawn per image


def augment_images(images: torch.Tensor, generator: torch.Generator, policy: str = "light",
                   norm: tuple = ((0.0,), (1.0,)), erasing: float = 0.0) -> torch.Tensor:
    """The batch under `policy`, then `--random-erasing`, drawn from `generator` (on the
    CPU, so the draws are the same on every device). `norm`: the (mean, std) per channel
    that normalised the images from [0, 1], so that a brightness shift of 10% is a tenth
    of the pixel range, and the library's policies see pixels."""
    mean, std = (torch.tensor(values, dtype=images.dtype, device=images.device)
                 .view(1, -1, 1, 1) for values in norm)
    if policy in LIBRARY:
        images = _per_image(images, generator, _library_policy(policy), mean, std)
    elif policy != "none":
        images = _affine_jitter(images, generator, POLICIES[policy], float(1 / std.mean()))
    if erasing:
        from torchvision.transforms import v2

        images = _per_image(images, generator, v2.RandomErasing(p=erasing), None, None)
    return images


def _library_policy(policy: str):
    from torchvision.transforms import v2

    return v2.RandAugment() if policy == "randaugment" else v2.TrivialAugmentWide()


def _per_image(images: torch.Tensor, generator: torch.Generator, transform, mean, std):
    """`transform` drawn for each image (on [0, 1] pixels when `mean` is given), from
    torch's generator seeded by `generator` and put back as it was."""
    pixels = images if mean is None else (images * std + mean).clamp(0, 1)
    seed = int(torch.randint(2 ** 31, (1,), generator=generator))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        out = torch.stack([transform(image) for image in pixels])
    return out if mean is None else (out - mean) / std


def _affine_jitter(images: torch.Tensor, generator: torch.Generator, rule: Policy,
                   span: float) -> torch.Tensor:
    """Crop (and flip) by one affine grid per image, then brightness (a share of the
    pixel range `span`) and contrast."""
    count = images.shape[0]

    def uniform(low: float, high: float) -> torch.Tensor:
        values = torch.rand(count, generator=generator) * (high - low) + low
        return values.to(images.device)

    scale = uniform(rule.min_area, 1.0).sqrt()  # of each side
    flip = torch.where(uniform(0, 1) < 0.5, -1.0, 1.0) if rule.flip else torch.ones_like(scale)
    shift_x, shift_y = (uniform(-1, 1) * (1 - scale), uniform(-1, 1) * (1 - scale))
    theta = torch.zeros(count, 2, 3, device=images.device)
    theta[:, 0, 0], theta[:, 0, 2] = scale * flip, shift_x
    theta[:, 1, 1], theta[:, 1, 2] = scale, shift_y
    grid = F.affine_grid(theta, list(images.shape), align_corners=False)
    images = F.grid_sample(images, grid.to(images.dtype), mode="bilinear",
                           padding_mode="reflection", align_corners=False)
    brightness = (uniform(-rule.jitter, rule.jitter) * span).view(-1, 1, 1, 1)
    contrast = uniform(1 - rule.jitter, 1 + rule.jitter).view(-1, 1, 1, 1)
    mean = images.mean(dim=(1, 2, 3), keepdim=True)
    return (images - mean) * contrast + mean + brightness


def mix(inputs: torch.Tensor, targets: torch.Tensor, mixup: float, cutmix: float,
        generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch mixed with itself by MixUp or CutMix; `targets` are one-hot (or multi-hot)
    floats and come back mixed alike. Alphas of 0 leave the batch as it is."""
    if not (mixup or cutmix):
        return inputs, targets
    seed = int(torch.randint(2 ** 31, (1,), generator=generator))
    draws = np.random.default_rng(seed)
    use_cutmix = cutmix > 0 and (not mixup or draws.random() < 0.5)
    lam = float(draws.beta(cutmix, cutmix) if use_cutmix else draws.beta(mixup, mixup))
    partner = torch.randperm(inputs.shape[0], generator=generator).to(inputs.device)
    if use_cutmix:
        inputs, lam = _paste_box(inputs, partner, lam, draws)
    else:
        inputs = lam * inputs + (1 - lam) * inputs[partner]
    return inputs, lam * targets + (1 - lam) * targets[partner]


def _paste_box(images: torch.Tensor, partner: torch.Tensor, lam: float,
               draws: np.random.Generator) -> tuple[torch.Tensor, float]:
    """The partner's pixels in a box of about 1 - lam of the image (cut at the edges);
    returns the images and the share of pixels each kept."""
    height, width = images.shape[-2:]
    side = np.sqrt(1 - lam)
    box_h, box_w = round(height * side), round(width * side)
    centre_y, centre_x = draws.integers(height), draws.integers(width)
    top, bottom = max(centre_y - box_h // 2, 0), min(centre_y + (box_h + 1) // 2, height)
    left, right = max(centre_x - box_w // 2, 0), min(centre_x + (box_w + 1) // 2, width)
    images = images.clone()
    images[..., top:bottom, left:right] = images[partner][..., top:bottom, left:right]
    return images, 1 - (bottom - top) * (right - left) / (height * width)
