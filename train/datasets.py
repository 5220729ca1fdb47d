"""A run's training and validation datasets, opened from the sides its data was split
into (train.sides): a stratified hold-out or fold, a pack-time split, --val, or the
files of a loose image folder."""

from dataclasses import replace

import packer
from packer import LooseImages
from packer.errors import PackerError
from train import sides
from train.config import TrainConfig
from train.data import DataInfo, part_cache
from train.mixing import source
from train.sides import of_run, packed_labels, stratified_sides


def _check_held(held: int, config: TrainConfig, fraction: float, total: int) -> None:
    if config.folds and held == 0:
        raise PackerError(f"--folds {config.folds}: fold {config.fold + 1} holds no sample of "
                          f"the {total:,} in {config.data}; use fewer folds")
    if config.val is None and fraction > 0 and held == 0:
        raise PackerError(f"--val-split {fraction:g} holds out no sample of the "
                          f"{total:,} in {config.data}: use a larger --val-split, --val "
                          "OTHER, or --val-split 0 to train without validation")


def datasets(info: DataInfo, config: TrainConfig, keys_only: bool = False):
    """Train and validation datasets (validation None when there is none); with
    `keys_only`, samples of their key alone, undecoded, in the training set's order."""
    if info.files is not None:
        return _loose_datasets(info, config)
    options = {"decode": "rgb8" if info.decoded_images else "raw",
               "image_size": config.image_size if info.decoded_images else None,
               "seed": config.seed, **part_cache(config)}
    if info.sides is None:  # a trained run's description: its config says them again
        info.sides = of_run(info, config)
    if keys_only:
        info = replace(info, inputs=[], label=None)
        options.update(decode="raw", image_size=None)
    if config.folds or (info.sides.fraction and not info.sides.train_split
                        and info.task == "classify" and not config.mix):
        stratified = _stratified(info, config, options)
        if stratified is not None:
            return stratified
        if config.folds:
            raise PackerError(f"--folds {config.folds}: {config.data} is read as a stream "
                              "(its parts cannot be read out of order), so a fold cannot be "
                              "held out; pack it as LMDB or HDF5, or with its shard indexes")
    train = packer.open_dataset(**source(config), shuffle=True, transform=info.keep(),
                                **info.sides.options("train"), **options)
    if config.val is not None:
        return train, packer.open_dataset(config.val, transform=info.keep(info.val_transform),
                                          **options)
    if not (info.sides.val_split or info.sides.fraction):
        return train, None
    val = packer.open_dataset(**source(config, every_sample=True), transform=info.keep(),
                              **info.sides.options("val"), **options)
    if info.sides.val_split and not val.total:
        raise PackerError(f"{config.data}: its split {info.sides.val_split} holds no sample "
                          "to validate on; name another with --val-split-name, or pack again")
    _check_held(val.total, config, info.sides.fraction, train.source.count)
    return train, val


def _stratified(info: DataInfo, config: TrainConfig, options: dict):
    """(train, validation) of a stratified --val-split (train.sides); None where the
    data cannot be read out of order."""
    read = packed_labels(config.data, part_cache(config))
    if read is None:
        return None
    labels, parts = read
    held = sides.held(labels if info.task == "classify" else [0] * len(labels), config,
                      info.sides.fraction)
    _check_held(int(held.sum()), config, info.sides.fraction, len(labels))
    train_side, val_side = stratified_sides(held, parts.part_counts, config.seed)
    options = {k: v for k, v in options.items() if k not in ("cache_dir", "cache_limit")}
    return (packer.PackedDataset(parts, order=train_side, shuffle=True, transform=info.keep(),
                                 **options),
            packer.PackedDataset(parts, order=val_side, transform=info.keep(), **options))


def _loose_datasets(info: DataInfo, config: TrainConfig):
    if config.val is not None:
        raise PackerError(f"--val {config.val}: a loose image folder ({config.data}) is "
                          "validated on a held-out --val-split; to validate on another "
                          "dataset, pack DATA first")
    fraction = info.sides.fraction
    held = sides.held([label for _, label in info.files], config, fraction) \
        if fraction else [False] * len(info.files)
    _check_held(int(sum(held)), config, fraction, len(info.files))
    train = [file for file, out in zip(info.files, held, strict=True) if not out]
    val = [file for file, out in zip(info.files, held, strict=True) if out]
    return (LooseImages(train, config.image_size),
            LooseImages(val, config.image_size) if val else None)
