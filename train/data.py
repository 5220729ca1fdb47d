"""What the data is (from the manifest) and how batches become model inputs."""

import io
import math
from dataclasses import dataclass, replace
from pathlib import Path

import torch

import packer
from packer import (
    IMAGE_FIELDS,
    MANIFEST_NAME,
    RAW_IMAGE_FIELD,
    loose_images,
    scan_folder,
)
from packer.errors import PackerError
from train.config import TrainConfig
from train.inputs import as_arrays
from train.mixing import merged, source
from train.sides import Sides, held_share, of_run, single_samples

STATS_SAMPLES = 512  # training samples that give array inputs their mean and std


@dataclass(frozen=True)
class AsTraining:
    """A --val sample in the training data's terms: its class id mapped by class name,
    its image under the training data's image key."""
    labels: tuple[int, ...] | None  # --val class id -> training class id
    keys: tuple[tuple[str, str], ...] = ()  # (--val field, training field)

    def __call__(self, sample: dict) -> dict:
        for old, new in self.keys:
            sample[new] = sample.pop(old)
        if self.labels is not None:
            sample["cls"] = self.labels[int(sample["cls"])]
        return sample


@dataclass(frozen=True)
class Keep:
    """A sample cut down to the fields training reads (so that a sidecar only some
    samples have does not stop batching), after `then` maps a --val sample."""
    fields: tuple[str, ...]
    then: AsTraining | None = None

    def __call__(self, sample: dict) -> dict:
        if self.then is not None:
            sample = self.then(sample)
        return {name: sample[name] for name in self.fields if name in sample}


@dataclass
class DataInfo:
    kind: str  # "image", "vector" or "sequence"
    inputs: list[str]  # the fields that make the model's input
    label: str | None  # "cls" or "target"
    task: str  # "classify", "multilabel" or "regress"
    classes: list[str] | None
    class_counts: list[int] | None
    input_shape: tuple  # of one sample: (C, H, W), (F,) or (C, T)
    stats: dict | None  # per-channel (vectors: per-feature) mean and std of array inputs
    files: list | None = None  # a loose image folder: (path, class id) per image
    targets: int = 1  # regression: values per sample
    val_transform: AsTraining | None = None  # --val samples in the training data's terms
    target_stats: dict | None = None  # regression: the targets' mean and std (training set)
    model_input: dict | None = None  # a pretrained model's own mean, std and interpolation
    sides: Sides | None = None  # which samples of DATA train and validate (train.sides)

    @property
    def num_outputs(self) -> int:
        return len(self.classes) if self.task in ("classify", "multilabel") else self.targets

    def keep(self, then: AsTraining | None = None) -> Keep:
        """The transform that keeps only the key, the inputs and the label."""
        return Keep(("__key__", *self.inputs, *([self.label] if self.label else [])), then)

    @property
    def decoded_images(self) -> bool:
        """Images the loader decodes (not arrays of pixels): encoded, or the RGB pixels
        `packer pack --encode raw` stores."""
        return self.kind == "image" and (not self.inputs[0].endswith(".npy")
                                         or self.inputs[0] == RAW_IMAGE_FIELD)


def describe(config: TrainConfig, training: bool = True) -> DataInfo:
    """Read the manifest; fail before training when the data cannot serve the task.
    `training`: also decide which samples train and validate (train.sides)."""
    if not (Path(config.data) / MANIFEST_NAME).is_file() and Path(config.data).is_dir() \
            and not config.mix:  # a mix's datasets are packed, or named as not
        return _describe_loose(config)
    info = merged([_describe_packed(path, replace(config, num_classes=None))
                   for path in config.mix], config) if config.mix else _describe_packed(
        config.data, config)
    info.sides = of_run(info, config) if training else Sides(None, None, 0.0)
    if config.val is not None:
        val = _describe_packed(config.val, replace(config, task=info.task, num_classes=None))
        info.val_transform = _as_training(info, val, config.val)
    if info.stats is None and not info.decoded_images:
        info.stats = _sample_stats(info, config)
    if info.task == "regress" and info.files is None:
        info.target_stats = _target_stats(info, config)
    return info


def image_shape(size) -> tuple[int, int, int]:
    """(3, height, width) of decoded images: `size` is a square's side or (height, width);
    None (not chosen yet) gives (3, 0, 0)."""
    if size is None:
        return 3, 0, 0
    return (3, size, size) if isinstance(size, int) else (3, *size)


def image_sizes(info: DataInfo, config: TrainConfig, count: int = 256) -> list[tuple[int, int]]:
    """(width, height) of up to `count` training images, read from their headers."""
    from PIL import Image

    if info.files is not None:
        step = max(len(info.files) // count, 1)
        paths = [path for path, _ in info.files[::step][:count]]
        return [Image.open(path).size for path in paths]
    data = packer.open_dataset(**source(config), decode="raw", shuffle=True, rank=0,
                               world_size=1, **part_cache(config))
    sizes, name = [], info.inputs[0]  # the key the loader gives images (`image`: mixed)
    for sample in data:
        encoded = sample[name]
        if name == RAW_IMAGE_FIELD:  # stored pixels, (height, width, 3)
            height, width = _pixels_shape(encoded)[:2]
            sizes.append((width, height))
        else:
            sizes.append(Image.open(io.BytesIO(encoded)).size)
        if len(sizes) == count:
            break
    return sizes


def _is_image(name: str) -> bool:
    return name == RAW_IMAGE_FIELD or name.rsplit(".", 1)[-1].lower() in IMAGE_FIELDS


def _pixels_shape(value) -> tuple[int, ...]:
    """The shape of stored pixels: an array (HDF5), or .npy bytes."""
    if hasattr(value, "shape"):
        return tuple(value.shape)
    import numpy as np

    return np.load(io.BytesIO(value), allow_pickle=False).shape


def _describe_packed(path: str, config: TrainConfig) -> DataInfo:
    manifest = packer.load_manifest(path, config.cache_dir, config.cache_limit)
    fields = manifest["fields"]
    label = next((n for n in ("cls", "target", "target.npy") if n in fields), None)
    if label is None:
        raise PackerError(f"{path}: the samples have no labels (no cls or target "
                          "field), so there is nothing to learn")
    width = (fields[label].get("shape") or [1])[0] if label != "cls" else 1
    table = manifest.get("table") or {}
    several = label != "cls" and width > 1 and manifest["source"].get("task") == "classify"
    task = config.task
    if task == "auto":
        task = "classify" if label == "cls" else "multilabel" if several else "regress"
    classes = table.get("label_columns") if task == "multilabel" else manifest.get("classes")
    if task in ("classify", "multilabel") and not classes:
        raise PackerError(f"{path}: no class names in the manifest for --task {task}")
    if config.num_classes is not None and classes and config.num_classes != len(classes):
        raise PackerError(f"--num-classes {config.num_classes}, but {path} has "
                          f"{len(classes)} classes: {', '.join(classes[:10])}")
    image = _image_key(fields, manifest["count"])
    if image and not config.inputs:
        kind, inputs, shape = "image", [image], image_shape(config.image_size)
    else:
        inputs = _input_fields(path, fields, label, config.inputs)
        kind, shape = _array_kind(fields, inputs)
    stats = _feature_stats(manifest) if kind == "vector" else None
    if stats and len(stats["mean"]) != shape[0]:
        stats = None  # the table's features are not the whole input
    return DataInfo(kind, inputs, label, task, classes, manifest.get("class_counts"), shape,
                    stats, targets=width)


def _image_key(fields: dict, count: int) -> str | None:
    """The key images come under: the one image field; "image" when samples of one
    image each use several (jpg and png, or jpg and JPG), as the loader yields them."""
    names = [n for n in fields if _is_image(n)]
    if len(names) > 1 and sum(fields[n].get("count", 0) for n in names) <= count:
        return "image"
    return names[0] if names else None


def _input_fields(path: str, fields: dict, label: str, chosen: str | None) -> list[str]:
    """--inputs, or every float array and every integer array that is not a time stamp."""
    arrays = [n for n, f in fields.items() if n.endswith("npy") and "shape" in f and n != label]
    if chosen:
        names = {n.removesuffix(".npy"): n for n in arrays}
        unknown = [n for n in chosen.split(",") if n.removesuffix(".npy") not in names]
        if unknown:
            raise PackerError(f"--inputs: {path} has no array field {', '.join(unknown)} "
                              f"(array fields: {', '.join(names) or 'none'})")
        return [names[n.removesuffix(".npy")] for n in chosen.split(",")]
    inputs = [n for n in arrays if fields[n]["dtype"].startswith("float") or
              "time" not in n.lower()]
    if inputs:
        return inputs
    ragged = [n for n, f in fields.items() if n.endswith("npy") and "shape" not in f]
    if ragged:
        raise PackerError(f"{path}: the arrays in {', '.join(ragged)} differ in length from "
                          "sample to sample (such as audio clips of different durations), so "
                          "they cannot be batched: cut them to one length before packing (from "
                          "one binary dump: pack windows of one length, --window N)")
    raise PackerError(f"{path}: no image or array field to train on (fields: "
                      f"{', '.join(fields)}; time stamps are left out unless --inputs "
                      "names them)")


def _array_kind(fields: dict, inputs: list[str]) -> tuple[str, tuple]:
    """A 2-D uint8 array is a one-channel image; arrays of at most one dimension make a
    feature vector; longer ones a (channels, time) sequence."""
    shapes = [fields[n]["shape"] for n in inputs]
    if len(inputs) == 1 and len(shapes[0]) == 2 and fields[inputs[0]]["dtype"] == "uint8":
        return "image", (1, *shapes[0])
    if all(len(s) <= 1 for s in shapes):
        return "vector", (sum(math.prod(s) for s in shapes),)
    lengths = {s[0] if s else 1 for s in shapes}
    if len(lengths) > 1:
        raise PackerError(f"--inputs {','.join(inputs)}: the arrays differ in length "
                          f"({', '.join(f'{n} {s}' for n, s in zip(inputs, shapes, strict=True))})"
                          "; choose fields of the same length")
    return "sequence", (sum(math.prod(s[1:]) for s in shapes), lengths.pop())


def _as_training(info: DataInfo, val: DataInfo, path: str) -> AsTraining | None:
    """How --val samples become the training data's: the same inputs, class ids by name."""
    if (val.kind, val.input_shape, val.label) != (info.kind, info.input_shape, info.label):
        raise PackerError(f"--val {path}: its samples hold {val.kind} {list(val.input_shape)} "
                          f"with label {val.label}, the training data's {info.kind} "
                          f"{list(info.input_shape)} with label {info.label}")
    if not info.decoded_images and val.inputs != info.inputs:
        raise PackerError(f"--val {path}: input fields {', '.join(val.inputs)}, the training "
                          f"data's {', '.join(info.inputs)}")
    labels = _val_labels(info, val.classes, path)
    keys = tuple((v, t) for v, t in zip(val.inputs, info.inputs, strict=True) if v != t)
    return AsTraining(labels, keys) if labels or keys else None


def _val_labels(info: DataInfo, classes: list[str] | None, path: str) -> tuple | None:
    """--val class ids mapped to the training ids by name (None: the same classes)."""
    if classes == info.classes:
        return None
    unknown = [c for c in classes if c not in info.classes]
    if info.task != "classify" or unknown:
        named = unknown if info.task == "classify" else classes
        raise PackerError(f"--val {path}: classes unknown to the training data: "
                          f"{', '.join(named)} (training classes: {', '.join(info.classes)})")
    return tuple(info.classes.index(c) for c in classes)


def _feature_stats(manifest: dict) -> dict | None:
    """Per-feature mean and std in feature order, from a packed table's manifest."""
    table = manifest.get("table") or {}
    if not table.get("stats"):
        return None
    stats = [table["stats"][name] for name in table["features"]]
    return {"mean": [s["mean"] for s in stats], "std": [s["std"] or 1.0 for s in stats]}


def _sample_stats(info: DataInfo, config: TrainConfig) -> dict:
    """Per-channel mean and std of the array inputs over the first training samples
    (the same on every rank)."""
    data = packer.open_dataset(**source(config), decode="raw", rank=0, world_size=1,
                               transform=info.keep(), **info.sides.options("train"),
                               **part_cache(config))
    batch = next(iter(packer.DataLoader(data, batch_size=STATS_SAMPLES)))
    values = as_arrays(batch, info, torch.device("cpu")).double()
    values = values.transpose(0, 1).reshape(values.shape[1], -1)  # (channels, the rest)
    finite = torch.isfinite(values)  # a NaN or inf value must not poison its channel
    count = finite.sum(dim=1).clamp_min(1)
    mean = torch.where(finite, values, 0.0).sum(dim=1) / count
    std = (torch.where(finite, values - mean[:, None], 0.0) ** 2).sum(dim=1).div(count).sqrt()
    return {"mean": mean.tolist(), "std": torch.where(std > 1e-8, std, 1.0).tolist()}


def _target_stats(info: DataInfo, config: TrainConfig) -> dict:
    """Mean and std of the regression targets of the first training samples (the same
    on every rank); a target of one value gets numbers, several get lists."""
    data = packer.open_dataset(**source(config), decode="raw", rank=0, world_size=1,
                               transform=Keep((info.label,)), **info.sides.options("train"),
                               **part_cache(config))
    batch = next(iter(packer.DataLoader(data, batch_size=STATS_SAMPLES)))
    values = torch.as_tensor(batch[info.label]).double().reshape(len(batch[info.label]), -1)
    finite = torch.isfinite(values)  # NaN targets are refused later, with their keys
    count = finite.sum(dim=0).clamp_min(1)
    mean = torch.where(finite, values, 0.0).sum(dim=0) / count
    std = (torch.where(finite, values - mean, 0.0) ** 2).sum(dim=0).div(count).sqrt()
    std = torch.where(std > 1e-8, std, 1.0)
    if values.shape[1] == 1:
        return {"mean": mean.item(), "std": std.item()}
    return {"mean": mean.tolist(), "std": std.tolist()}


def _describe_loose(config: TrainConfig) -> DataInfo:
    """An ImageFolder that was never packed: read file by file (for comparisons)."""
    scan = scan_folder(Path(config.data))
    if scan.label_source != "folders":
        raise PackerError(f"{config.data}: not a packed dataset, nor an image folder with one "
                          "sub-folder per class")
    files = loose_images(Path(config.data))
    counts = [sum(1 for _, label in files if label == i) for i in range(len(scan.classes))]
    info = DataInfo("image", ["jpg"], "cls", "classify", scan.classes, counts,
                    image_shape(config.image_size), None, files,
                    sides=Sides(None, None, *held_share(config, len(files))))
    info.sides = single_samples(info.sides, info)
    return info


def part_cache(config: TrainConfig) -> dict:
    """open_dataset's options of the part cache that s3:// datasets are read through."""
    return {"cache_dir": config.cache_dir, "cache_limit": config.cache_limit}
