"""Which samples of DATA a run trains on, and which it validates on.

DATA packed with splits (`packer pack --split`, or its train/ val/ test/ folders): the
split named train trains; the validation split (`--val-split-name`, else the first of
val, valid, validation and dev that DATA has) validates; no other split (test) is read.
Where DATA has no validation split, `--val-split` holds out a fraction of the train
split. DATA without splits: `--val-split` holds out a fraction of it (the loader's
`holdout`), stratified for classification: each class gives the held-out share of its
own samples (at least one when it has two or more), so a rare class is validated too,
drawn from the seed. Each side is then an epoch order of its own (as
packer.read.elastic.Order: `total`, `units`, `text`, `identity`) that the loader
reads like any other: the training side in units of up to UNIT consecutive samples
shuffled by (seed, epoch), the held-out side sample by sample in packed order.
Regression, multi-label, mixed and streamed (unseekable) data keep the loader's own
evenly spread holdout. `--val OTHER` validates on another dataset, and DATA's train
split (or all of DATA) trains.
"""

import hashlib
import json
from dataclasses import dataclass

import numpy as np

import packer
from packer.errors import PackerError
from packer.read.plan import Segment
from train.config import TrainConfig

VAL_NAMES = ("val", "valid", "validation", "dev")
TRAIN_NAME = "train"


@dataclass(frozen=True)
class Sides:
    train_split: str | None  # DATA's pack-time split that trains (None: all of DATA)
    val_split: str | None  # ... that validates (None: a held-out fraction, or --val)
    fraction: float  # of the training samples held out for validation (0: none)
    why: str | None = None  # why that share, where the data chose it (--val-split auto)

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
        count = sum(packer.load_manifest(path, config.cache_dir, config.cache_limit)["count"]
                    for path in config.mix)
        return Sides(None, None, *held_share(config, count))
    manifest = packer.load_manifest(config.data, config.cache_dir, config.cache_limit)
    chosen = choose(manifest, config)
    if info.task == "classify" and chosen.train_split:
        info.class_counts = manifest["splits"]["sets"][chosen.train_split]["class_counts"]
    return single_samples(chosen, info)


def single_samples(sides: Sides, info) -> Sides:
    """--val-split auto where no class has two samples: holding one out would take its
    class out of training (a stratified split never does), so no validation, said why."""
    counts = info.class_counts if info.task == "classify" else None
    if sides.why is None or not sides.fraction or not counts or max(counts) > 1:
        return sides
    return Sides(sides.train_split, None, 0.0,
                 f"no class has two samples ({sum(counts):,} samples of {len(counts):,} "
                 "classes): holding any out would take its class out of training, so no "
                 "validation (no early stopping; best.pt by the training loss)")


def choose(manifest: dict, config: TrainConfig) -> Sides:
    """The sides of DATA (its manifest) for this run's options."""
    splits = list((manifest.get("splits") or {}).get("sets") or {})
    if not splits:
        if config.val_split_name:
            raise PackerError(f"--val-split-name {config.val_split_name}: {config.data} was "
                              "packed without splits (`packer pack --split "
                              "train=0.8,val=0.2` makes them); use --val-split or --val")
        return Sides(None, None, *held_share(config, manifest["count"]))
    if config.folds:
        raise PackerError(f"--folds {config.folds}: {config.data} was split when packed "
                          f"({', '.join(splits)}), and a run trains on its split "
                          f"{TRAIN_NAME}; cross-validate a dataset packed without --split, "
                          "or leave out --folds")
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
    if name:
        return Sides(TRAIN_NAME, name, 0.0)
    return Sides(TRAIN_NAME, None, *held_share(config, manifest["splits"]["sets"][TRAIN_NAME]
                                               ["count"]))


SMALL_DATA = 1_000  # samples under which a run gets the small-data recipe
HELD_SHARE, MAX_HELD_SHARE = 0.1, 0.2  # of the samples --val-split auto holds out
MIN_HELD = 50  # samples it reaches for, within MAX_HELD_SHARE


def held_share(config: TrainConfig, count: int) -> tuple[float, str | None]:
    """(the share of `count` samples that validation holds, why where it was chosen):
    --val-split, one fold of --folds, or auto: a tenth, raised toward MIN_HELD samples
    for small data, at most MAX_HELD_SHARE."""
    if config.val is not None:
        return 0.0, None
    if config.folds:
        return 1 / config.folds, None
    if config.val_split is not None:
        return config.val_split, None
    share = round(min(max(HELD_SHARE, MIN_HELD / max(count, 1)), MAX_HELD_SHARE), 2)
    if share == HELD_SHARE:
        return share, f"a tenth of the {count:,} samples held out for validation"
    return share, (f"a small dataset ({count:,} samples): a tenth would hold out "
                   f"{round(count / 10):,}, so more, toward {MIN_HELD} (at most "
                   f"{MAX_HELD_SHARE:g}); --folds 5 validates on every sample once")


UNIT = 64  # consecutive training samples shuffled as one, as the loader's units


class Side:
    """The samples of one side of the split, as an epoch's sequence of units."""

    def __init__(self, runs: list[Segment], shuffle: bool, seed: int, name: str):
        self.runs, self.shuffle, self.seed, self.name = runs, shuffle, seed, name
        self.total = sum(run.count for run in runs)
        self._identity = None

    def units(self, epoch: int, shuffled: bool = True) -> list[Segment]:
        if not (self.shuffle and shuffled):
            return list(self.runs)
        order = np.random.default_rng([self.seed, epoch]).permutation(len(self.runs))
        return [self.runs[i] for i in order]

    def text(self) -> str:
        return f"the {self.name} side of a stratified split: {self.total:,} samples"

    def identity(self) -> str:
        if self._identity is None:
            runs = [(run.part, run.start, run.count) for run in self.runs]
            self._identity = hashlib.sha256(json.dumps([runs, self.shuffle, self.name])
                                            .encode()).hexdigest()[:16]
        return self._identity


def held_out(labels: list[int], fraction: float, seed: int) -> np.ndarray:
    """Which samples (a bool per sample) validation holds: round(fraction x n) of each
    class's n samples, at least one where n >= 2, drawn from `seed`. Labels below 0
    (no label) stay in training."""
    labels = np.asarray(labels)
    held = np.zeros(len(labels), dtype=bool)
    draws = np.random.default_rng([seed, 0x5EED])
    for label in np.unique(labels[labels >= 0]):
        members = np.flatnonzero(labels == label)
        count = min(max(round(len(members) * fraction), 1), len(members) - 1)
        held[draws.permutation(members)[:count]] = True
    return held


def fold_held(labels: list[int], folds: int, fold: int, seed: int) -> np.ndarray:
    """Which samples (a bool per sample) fold `fold` of `folds` validates on: each class's
    samples, drawn from `seed`, dealt to the folds in turn (a class's share of every
    fold within one sample, the folds' sizes too). Labels below 0 stay in training."""
    labels = np.asarray(labels)
    dealt = np.full(len(labels), -1)
    draws, turn = np.random.default_rng([seed, 0xF01D]), 0
    for label in np.unique(labels[labels >= 0]):
        members = draws.permutation(np.flatnonzero(labels == label))
        dealt[members] = (turn + np.arange(len(members))) % folds
        turn += len(members)
    return dealt == fold


def held(labels: list[int], config: TrainConfig, fraction: float) -> np.ndarray:
    """The samples validation holds: fold `config.fold` of --folds, else the stratified
    share `fraction` (--val-split's, or the one chosen: Sides.fraction)."""
    if config.folds:
        return fold_held(labels, config.folds, config.fold or 0, config.seed)
    return held_out(labels, fraction, config.seed)


def stratified_sides(held: np.ndarray, part_counts: list[int], seed: int) -> tuple[Side, Side]:
    """(training side, held-out side) of a dataset of parts of `part_counts` samples
    whose samples, in packed order, are held out where `held` is True."""
    starts = np.cumsum([0, *part_counts])
    train, val = [], []
    for part, (begin, end) in enumerate(zip(starts[:-1], starts[1:], strict=True)):
        val += [Segment(part, int(i - begin), 1) for i in np.flatnonzero(held[begin:end]) + begin]
        train += _runs(part, np.flatnonzero(~held[begin:end]))
    return Side(train, True, seed, "training"), Side(val, False, seed, "validation")


def _runs(part: int, positions: np.ndarray) -> list[Segment]:
    """Consecutive positions of one part as runs of at most UNIT samples."""
    runs = []
    cuts = np.flatnonzero(np.diff(positions) != 1) + 1
    for stretch in np.split(positions, cuts):
        for start in range(0, len(stretch), UNIT):
            piece = stretch[start:start + UNIT]
            runs.append(Segment(part, int(piece[0]), len(piece)))
    return runs


_READ: dict[tuple, list[int]] = {}  # (path, parts, manifest) -> labels, read once


def packed_labels(path, cache: dict) -> tuple[list[int], object] | None:
    """Every sample's class id in packed order, and the dataset's parts; None when its
    parts cannot be read out of order (streamed shards). The labels are read once (the
    training set and the RAM cache's key order split the same dataset)."""
    data = packer.open_dataset(path, decode="raw", rank=0, world_size=1, on_error="raise",
                               transform=_label, **cache)
    if not data.source.seekable:
        return None
    manifest = getattr(data.source, "manifest", None)  # a dataset packed again: read again
    known = (str(path), tuple(data.source.part_counts),
             json.dumps(manifest, sort_keys=True, default=str) if manifest else None)
    if known not in _READ:
        _READ.clear()  # one dataset's at a time
        _READ[known] = list(data)
    return _READ[known], data.source


def _label(sample: dict) -> int:
    return int(sample.get("cls", -1))
