"""--val-split of classified data, stratified: each class gives the held-out share of its
own samples (at least one when it has two or more), so a rare class is validated too.

The split is drawn from the seed: the same --seed holds out the same samples. Each side
is an epoch order of its own (as packer.read.elastic.Order: `total`, `units`,
`describe`, `identity`) that the loader reads like any other: the training side in
units of up to UNIT consecutive samples shuffled by (seed, epoch), the held-out side
sample by sample in the order they were packed. Regression, multi-label, mixed and
streamed (unseekable) data keep the loader's own evenly spread holdout.
"""

import hashlib
import json

import numpy as np

import packer
from packer.read.plan import Segment

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

    def describe(self) -> str:
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


def sides(held: np.ndarray, part_counts: list[int], seed: int) -> tuple[Side, Side]:
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
