"""How a collated batch becomes the model's input and target tensors: on the device, as
float, at the model's input size, normalised (by the data's statistics, or a library
model's own). `info` is the data's train.data.DataInfo."""

import torch

IMAGE_MEAN, IMAGE_STD = 0.5, 0.25  # uint8 / 255 mapped to about [-2, 2]


def to_inputs(batch: dict, info, device: torch.device,
              channels_last: bool = False) -> torch.Tensor:
    """A collated batch's input tensor, on the device, as float and normalised."""
    if info.model_input is not None:  # a library model's own normalisation
        pixels = batch[info.inputs[0]].to(device, non_blocking=True).float() / 255
        images = _normalise(pixels if info.decoded_images else pixels.unsqueeze(1),
                            info.model_input)
    elif info.decoded_images:
        images = batch[info.inputs[0]].to(device, non_blocking=True)
        images = (images.float() / 255 - IMAGE_MEAN) / IMAGE_STD
    else:
        images = _normalise(as_arrays(batch, info, device), info.stats)
    if info.kind == "image" and tuple(images.shape[-2:]) != tuple(info.input_shape[1:]):
        images = _resized(images, info)
    if channels_last and info.kind == "image":
        return images.contiguous(memory_format=torch.channels_last)
    return images


def _resized(images: torch.Tensor, info) -> torch.Tensor:
    """Array images (which the loader does not resize) at the model's input size."""
    mode = (info.model_input or {}).get("interpolation", "bilinear")
    mode = mode if mode in ("bilinear", "bicubic", "nearest") else "bilinear"
    return torch.nn.functional.interpolate(images, size=tuple(info.input_shape[1:]), mode=mode,
                                           align_corners=False if mode != "nearest" else None,
                                           antialias=mode != "nearest")


def as_arrays(batch: dict, info, device: torch.device) -> torch.Tensor:
    """The array inputs as one float tensor: (B, 1, H, W) scaled to [0, 1], (B, F) or
    (B, C, T)."""
    parts = [batch[n].to(device, non_blocking=True).float() for n in info.inputs]
    if info.kind == "image":
        return parts[0].unsqueeze(1) / 255
    if info.kind == "vector":
        return torch.cat([p.reshape(p.shape[0], -1) for p in parts], dim=1)
    parts = [p.reshape(p.shape[0], p.shape[1], -1) for p in parts]  # (B, T, channels)
    return torch.cat(parts, dim=2).transpose(1, 2)


def _normalise(values: torch.Tensor, stats: dict) -> torch.Tensor:
    """(values - mean) / std per channel (dimension 1)."""
    shape = (1, -1) + (1,) * (values.ndim - 2)
    mean = torch.tensor(stats["mean"], device=values.device).view(shape)
    std = torch.tensor(stats["std"], device=values.device).clamp_min(1e-8).view(shape)
    return (values - mean) / std


def to_targets(batch: dict, info, device: torch.device) -> torch.Tensor:
    target = torch.as_tensor(batch[info.label]).to(device, non_blocking=True)
    if info.task == "classify":
        return target.long()
    return target.float()
