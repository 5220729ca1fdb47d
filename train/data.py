"""What the data is (from the manifest) and how batches become model inputs."""

from dataclasses import dataclass
from pathlib import Path

import torch

import packer
from packer.bench import LooseImages, loose_images
from packer.decode import IMAGE_FIELDS
from packer.errors import PackerError
from packer.manifest import MANIFEST_NAME
from packer.sources.files import scan_folder
from train.config import TrainConfig

IMAGE_MEAN, IMAGE_STD = 0.5, 0.25  # uint8 / 255 mapped to about [-2, 2]


@dataclass
class DataInfo:
    kind: str  # "image", "vector" or "sequence"
    inputs: list[str]  # the fields that make the model's input
    label: str | None  # "cls" or "target"
    task: str  # "classify", "multilabel" or "regress"
    classes: list[str] | None
    class_counts: list[int] | None
    input_shape: tuple  # of one sample: (3, H, W), (F,) or (C, T)
    stats: dict | None  # per-feature mean and std for vectors, from the manifest
    files: list | None = None  # a loose image folder: (path, class id) per image
    targets: int = 1  # regression: values per sample

    @property
    def num_outputs(self) -> int:
        return len(self.classes) if self.task in ("classify", "multilabel") else self.targets


def _array_fields(fields: dict) -> list[str]:
    return [n for n, f in fields.items() if n.endswith("npy") and "shape" in f]


def describe(config: TrainConfig) -> DataInfo:
    """Read the manifest; fail before training when the data cannot serve the task."""
    if not (Path(config.data) / MANIFEST_NAME).is_file() and Path(config.data).is_dir():
        return _describe_loose(config)
    manifest = packer.load_manifest(config.data)
    fields = manifest["fields"]
    images = [n for n in fields if n.lower() in IMAGE_FIELDS]
    label = next((n for n in ("cls", "target", "target.npy") if n in fields), None)
    arrays = [n for n in _array_fields(fields) if n != label]
    if label is None:
        raise PackerError(f"{config.data}: the samples have no labels (no cls or target "
                          "field), so there is nothing to learn")
    width = (fields[label].get("shape") or [1])[0] if label != "cls" else 1
    table = manifest.get("table") or {}
    several = label != "cls" and width > 1 and manifest["source"].get("task") == "classify"
    task = config.task
    if task == "auto":
        task = "classify" if label == "cls" else "multilabel" if several else "regress"
    classes = table.get("label_columns") if task == "multilabel" else manifest.get("classes")
    if task in ("classify", "multilabel") and not classes:
        raise PackerError(f"{config.data}: no class names in the manifest for --task {task}")
    if config.num_classes is not None and classes and config.num_classes != len(classes):
        raise PackerError(f"--num-classes {config.num_classes}, but {config.data} has "
                          f"{len(classes)} classes: {', '.join(classes[:10])}")
    if images:
        kind, inputs, shape = "image", images[:1], (3, config.image_size, config.image_size)
    elif len(arrays) == 1 and len(fields[arrays[0]]["shape"]) == 1:
        kind, inputs, shape = "vector", arrays, tuple(fields[arrays[0]]["shape"])
    elif arrays:
        lengths = {fields[n]["shape"][0] for n in arrays}
        channels = sum(_channels(fields[n]["shape"]) for n in arrays)
        kind, inputs, shape = "sequence", arrays, (channels, lengths.pop())
    else:
        raise PackerError(f"{config.data}: no image or array field to train on "
                          f"(fields: {', '.join(fields)})")
    return DataInfo(kind, inputs, label, task, classes, manifest.get("class_counts"), shape,
                    _feature_stats(manifest), targets=width)


def _feature_stats(manifest: dict) -> dict | None:
    """Per-feature mean and std in feature order, from a packed table's manifest."""
    table = manifest.get("table") or {}
    if not table.get("stats"):
        return None
    stats = [table["stats"][name] for name in table["features"]]
    return {"mean": [s["mean"] for s in stats], "std": [s["std"] or 1.0 for s in stats]}


def _describe_loose(config: TrainConfig) -> DataInfo:
    """An ImageFolder that was never packed: read file by file (for comparisons)."""
    scan = scan_folder(Path(config.data))
    if scan.label_source != "folders":
        raise PackerError(f"{config.data}: not a packed dataset, nor an image folder with one "
                          "sub-folder per class")
    files = loose_images(Path(config.data))
    counts = [sum(1 for _, label in files if label == i) for i in range(len(scan.classes))]
    return DataInfo("image", ["jpg"], "cls", "classify", scan.classes, counts,
                    (3, config.image_size, config.image_size), None, files)


def _loose_datasets(info: DataInfo, config: TrainConfig):
    order = torch.randperm(len(info.files), generator=torch.Generator().manual_seed(0))
    held = int(len(order) * (config.val_split if config.val is None else 0))
    pick = [info.files[i] for i in order.tolist()]
    train = LooseImages(pick[held:], config.image_size)
    return train, (LooseImages(pick[:held], config.image_size) if held else None)


def _channels(shape: list[int]) -> int:
    channels = 1
    for size in shape[1:]:
        channels *= size
    return channels


def datasets(info: DataInfo, config: TrainConfig):
    """Train and validation datasets (validation None when there is none)."""
    if info.files is not None:
        return _loose_datasets(info, config)
    options = {"decode": "rgb8" if info.kind == "image" else "raw",
               "image_size": config.image_size if info.kind == "image" else None,
               "seed": config.seed}
    split = config.val_split if config.val is None and config.val_split > 0 else None
    train = packer.open_dataset(config.data, shuffle=True,
                                holdout=(split, "train") if split else None, **options)
    if config.val is not None:
        val = packer.open_dataset(config.val, **options)
    elif split:
        val = packer.open_dataset(config.data, holdout=(split, "val"), **options)
    else:
        val = None
    return train, val


def to_inputs(batch: dict, info: DataInfo, device: torch.device,
              channels_last: bool = False) -> torch.Tensor:
    """A collated batch's input tensor, on the device, as float."""
    if info.kind == "image":
        images = batch[info.inputs[0]].to(device, non_blocking=True)
        images = (images.float() / 255 - IMAGE_MEAN) / IMAGE_STD
        return images.contiguous(memory_format=torch.channels_last) if channels_last else images
    if info.kind == "vector":
        values = batch[info.inputs[0]].to(device, non_blocking=True).float()
        if info.stats:
            mean = torch.tensor(info.stats["mean"], device=device)
            std = torch.tensor(info.stats["std"], device=device).clamp_min(1e-8)
            values = (values - mean) / std
        return values
    parts = [batch[n].to(device, non_blocking=True).float() for n in info.inputs]
    parts = [p.reshape(p.shape[0], p.shape[1], -1) for p in parts]  # (B, T, channels)
    return torch.cat(parts, dim=2).transpose(1, 2)  # (B, C, T)


def to_targets(batch: dict, info: DataInfo, device: torch.device) -> torch.Tensor:
    target = torch.as_tensor(batch[info.label]).to(device, non_blocking=True)
    if info.task == "classify":
        return target.long()
    return target.float()
