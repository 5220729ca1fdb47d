"""Which samples of DATA a run trains on, and which it validates on.

DATA packed with splits (`packer pack --split`, or its train/ val/ test/ folders): the
split named train trains; the validation split (`--val-split-name`, else the first of
val, valid, validation and dev that DATA has) validates; no other split (test) is read.
Where DATA has no validation split, `--val-split` holds out a fraction of the train
split. DATA without splits: `--val-split` holds out a fraction of it (the loader's
`holdout`). `--val OTHER` validates on another dataset, and DATA's train split (or all
of DATA) trains.
"""

from dataclasses import dataclass

import packer
from packer.errors import PackerError
from train.config import TrainConfig

VAL_NAMES = ("val", "valid", "validation", "dev")
TRAIN_NAME = "train"


@dataclass(frozen=True)
class Sides:
    train_split: str | None  # DATA's pack-time split that trains (None: all of DATA)
    val_split: str | None  # ... that validates (None: a held-out fraction, or --val)
    fraction: float  # of the training samples held out for validation (0: none)

    def options(self, side: str) -> dict:
        """open_dataset's options that select the `side` ("train" or "val") of DATA."""
        if side == "val" and self.val_split:
            return {"split": self.val_split}
        held = {"holdout": (self.fraction, side)} if self.fraction else {}
        return {**({"split": self.train_split} if self.train_split else {}), **held}

    def text(self, data: str) -> str:
        """What a run says of the samples it reads, where DATA's splits chose them."""
        val = (f"validating on its split {self.val_split}" if self.val_split else
               f"validating on {self.fraction:g} of it held out (it has no split val, valid, "
               "validation or dev)" if self.fraction else "without validation")
        return (f"{data} was split when packed: training on its split {self.train_split}, "
                f"{val}; no other split is read")


def of_run(info, config: TrainConfig) -> Sides:
    """The sides of this run's DATA (train.data.DataInfo `info`, whose class counts become
    those of the samples that train)."""
    if config.mix:
        if config.val_split_name:
            raise PackerError(f"--val-split-name {config.val_split_name}: a mix of datasets "
                              "is read whole; validate with --val-split or --val")
        return Sides(None, None, config.val_split if config.val is None else 0.0)
    manifest = packer.load_manifest(config.data, config.cache_dir, config.cache_limit)
    chosen = choose(manifest, config)
    if info.task == "classify" and chosen.train_split:
        info.class_counts = manifest["splits"]["sets"][chosen.train_split]["class_counts"]
    return chosen


def choose(manifest: dict, config: TrainConfig) -> Sides:
    """The sides of DATA (its manifest) for this run's options."""
    splits = list((manifest.get("splits") or {}).get("sets") or {})
    if not splits:
        if config.val_split_name:
            raise PackerError(f"--val-split-name {config.val_split_name}: {config.data} was "
                              "packed without splits (`packer pack --split "
                              "train=0.8,val=0.2` makes them); use --val-split or --val")
        return Sides(None, None, config.val_split if config.val is None else 0.0)
    if TRAIN_NAME not in splits:
        raise PackerError(f"{config.data}: its splits are {', '.join(splits)}, and none is "
                          f"named {TRAIN_NAME}, the split a run trains on; pack it again "
                          "with --split train=...,val=...")
    if config.val is not None:
        return Sides(TRAIN_NAME, None, 0.0)
    name = config.val_split_name or next((n for n in VAL_NAMES if n in splits), None)
    if name is not None and (name not in splits or name == TRAIN_NAME):
        raise PackerError(f"--val-split-name {name}: {config.data}'s splits are "
                          f"{', '.join(splits)}; name one other than {TRAIN_NAME}")
    return Sides(TRAIN_NAME, name, 0.0 if name else config.val_split)

