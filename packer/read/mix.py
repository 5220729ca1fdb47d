"""Several packed datasets read as one, in given proportions:
`packer.open_dataset([a, b, c], weights=[0.6, 0.3, 0.1])`.

The epoch of a mix is L samples: `samples=`, or else the length at which the first
source to run out is read once (the largest L with w_i * L <= N_i for every source i,
weights w summing to 1, N_i samples in source i). Source i gives n_i = w_i * L of them
(rounded so that they add up to L). Each source is read as an endless stream, its own
epochs one after another (each one its units shuffled by (seed, source, its epoch)), and
epoch e of the mix takes positions [e * n_i, (e + 1) * n_i) of it: every sample of a
source comes once before any comes twice, however the weights cut it.

The units of all sources then make one sequence, each placed by where its middle
falls in its source's share of the epoch, so that every stretch of the sequence holds
the sources in their proportions:

    a (0.75)  |a3      |a0      |a5      |a1      |a4      |a2      |
    b (0.25)  |b1                        |b0                        |
    the mix   |a3|a0|b1|a5|a1|a4|b0|a2|   (units; then windows shuffle their samples)

That sequence is the epoch's order (packer.read.elastic): ranks, workers, windows,
state_dict and a resume on other workers or ranks work as for one dataset, and the
reads are the same runs of consecutive samples. Parts are numbered across sources
(source i's part p is part offset_i + p). Classes are matched by name: the first
source's keep their ids, names new in a later source come after them, and each
source's class ids (`cls`) are mapped to those as read (one lookup per window of
columns; per sample where the reader gives samples, and only where ids change).
"""

import bisect
import hashlib
import json

import numpy as np

from packer.read import plan
from packer.read.dataset import open_parts
from packer.read.plan import Segment

CLASS_FIELD = "cls"


def open_mix(paths, weights, samples: int | None, *, unit: int, shuffle: bool, seed: int,
             holdout=None, cache_dir=None, cache_limit=None) -> tuple["MixedParts",
                                                                      "MixedOrder"]:
    """The source and the epoch's order of a mix of the datasets `paths` (of one side of
    each, with `holdout`: as PackedDataset's)."""
    if not isinstance(paths, list | tuple) or not paths:
        raise ValueError(f"weights= mixes several datasets: give a list of them, not {paths!r}")
    if samples is not None and samples < 1:
        raise ValueError(f"samples={samples}: the epoch's length must be at least 1")
    sources = [open_parts(path, cache_dir, cache_limit) for path in paths]
    units = [plan.units(source.part_counts, _unit(source, unit, holdout), False, 0, 0, holdout)
             for source in sources]
    counts = [sum(run.count for run in runs) for runs in units]
    weights = _weights(weights, counts)
    empty = next((path for path, count in zip(paths, counts, strict=True) if not count), None)
    if empty is not None:
        side = " on that side of the holdout" if holdout else ""
        raise ValueError(f"{empty}: holds no samples{side}, so it cannot give its share of "
                         "a mix")
    mixed = MixedParts(sources)
    return mixed, MixedOrder(mixed, _shares(counts, weights, samples), units, shuffle, seed)


def _unit(source, unit: int, holdout) -> int | None:
    """A dataset's unit of order, as PackedDataset cuts it."""
    if not source.seekable:
        return None
    return max(1, min(unit, int(source.count * holdout[0] / 16))) if holdout else unit


def _weights(weights, counts: list[int]) -> list[float]:
    """The weights given, each dataset's samples for "sizes", or 1 each for None."""
    if weights == "sizes":
        return [float(count) for count in counts]
    weights = [1.0] * len(counts) if weights is None else list(weights)
    if len(weights) != len(counts) or not all(
            isinstance(w, int | float) and np.isfinite(w) and w > 0 for w in weights):
        raise ValueError(f"weights={weights}: give one positive number per dataset "
                         f"({len(counts)} datasets), or \"sizes\"")
    return weights


def _shares(counts: list[int], weights: list[float], samples: int | None) -> list[int]:
    """Samples of each source in an epoch of `samples` (or of the default length)."""
    total = sum(weights)
    fractions = [w / total for w in weights]
    length = samples or min(int(count / f * (1 + 1e-12)) for count, f in
                            zip(counts, fractions, strict=True))
    exact = [f * length for f in fractions]
    shares = [int(x) for x in exact]
    by_remainder = sorted(range(len(exact)), key=lambda i: shares[i] - exact[i])
    for i in by_remainder[:length - sum(shares)]:
        shares[i] += 1
    return shares


class MixedOrder:
    """The sequence of a mix's units for an epoch (elastic.Order's interface)."""

    def __init__(self, mixed: "MixedParts", shares: list[int], units: list[list[Segment]],
                 shuffle: bool, seed: int):
        self.mixed, self.shares, self.shuffle, self.seed = mixed, shares, shuffle, seed
        self.unshuffled = units  # each dataset's, in its order on disk
        self.total, self._identity = sum(shares), None

    def units(self, epoch: int, shuffled: bool = True) -> list[Segment]:
        placed = []
        for number, share in enumerate(self.shares):
            at = 0
            for run in self._stream(number, epoch * share, (epoch + 1) * share, shuffled):
                placed.append(((at + run.count / 2) / share, number, run))
                at += run.count
        placed.sort(key=lambda item: item[:2])
        return [Segment(self.mixed.offsets[number] + run.part, run.start, run.count)
                for _, number, run in placed]

    def _stream(self, number: int, begin: int, end: int, shuffled: bool) -> list[Segment]:
        """The runs at positions [begin, end) of source `number`'s endless stream."""
        units = self.unshuffled[number]
        size, out = sum(run.count for run in units), []
        for turn in range(begin // size, -(-end // size)):
            order = units
            if self.shuffle and shuffled:
                permutation = np.random.default_rng([self.seed, number, turn]).permutation(
                    len(units))
                order = [units[i] for i in permutation]
            low, high = max(begin - turn * size, 0), min(end - turn * size, size)
            out += plan.slice_runs(order, low, high)
        return out

    def text(self) -> str:
        return (f"a mix of {len(self.shares)} datasets, {' + '.join(map(str, self.shares))} "
                f"samples an epoch, shuffle={self.shuffle}")

    def identity(self) -> str:
        if self._identity is None:
            units = [[(r.part, r.start, r.count) for r in u] for u in self.unshuffled]
            self._identity = hashlib.sha256(json.dumps(
                [units, self.shares, self.shuffle]).encode()).hexdigest()[:16]
        return self._identity


class MixedParts:
    """Several datasets' parts as one dataset's (open_parts of each, parts numbered
    across them), with one class list."""

    def __init__(self, sources: list):
        self.sources = sources
        self.path = " + ".join(str(source.path) for source in sources)
        self.offsets = np.cumsum([0] + [len(s.part_counts) for s in sources]).tolist()
        self.part_counts = [count for source in sources for count in source.part_counts]
        self.seekable = all(source.seekable for source in sources)
        self.classes, self.class_maps = _classes_by_name([s.classes for s in sources])

    @property
    def count(self) -> int:
        return sum(self.part_counts)

    def field_counts(self) -> tuple[dict[str, int], int]:
        fields: dict[str, int] = {}
        for source in self.sources:
            counts, _ = source.field_counts()
            for name, count in counts.items():
                fields[name] = fields.get(name, 0) + count
        return fields, self.count

    def reader(self, runs=None) -> "MixedReader":
        return MixedReader(self, runs)


def _classes_by_name(lists: list[list[str] | None]) -> tuple[list[str] | None, list]:
    """(one class list: the first dataset's, then names new in later ones; for each
    dataset, the array that maps its ids to those, or None where they stay)."""
    if all(classes is None for classes in lists):
        return None, [None] * len(lists)
    merged: list[str] = []
    for classes in lists:
        merged += [name for name in classes or [] if name not in merged]
    maps = []
    for classes in lists:
        ids = np.array([merged.index(name) for name in classes or []], np.int64)
        maps.append(None if np.array_equal(ids, np.arange(len(ids))) else ids)
    return merged, maps


class MixedReader:
    """Runs of a mix's parts, each read by its dataset's reader; class ids mapped to the
    mix's. Windows whose runs come from one dataset are read as that dataset's reader
    reads them (columns, in place); others run by run, or as columns put together."""

    def __init__(self, mixed: MixedParts, runs=None):
        self.mixed = mixed
        self.readers = [source.reader(None if runs is None else [
            Segment(run.part - mixed.offsets[number], run.start, run.count)
            for run in runs if self._source(run.part) == number])
            for number, source in enumerate(mixed.sources)]

    def _source(self, part: int) -> int:
        return bisect.bisect_right(self.mixed.offsets, part) - 1

    def _groups(self, runs) -> list[tuple[int, list[Segment]]]:
        """(dataset, its runs) of consecutive runs of one dataset."""
        groups: list[tuple[int, list[Segment]]] = []
        for run in runs:
            number = self._source(run.part)
            local = Segment(run.part - self.mixed.offsets[number], run.start, run.count)
            if groups and groups[-1][0] == number:
                groups[-1][1].append(local)
            else:
                groups.append((number, [local]))
        return groups

    def read(self, part: int, start: int, count: int) -> list[dict]:
        number = self._source(part)
        samples = self.readers[number].read(part - self.mixed.offsets[number], start, count)
        ids = self.mixed.class_maps[number]
        if ids is not None:
            for sample in samples:
                if CLASS_FIELD in sample:
                    sample[CLASS_FIELD] = int(ids[int(sample[CLASS_FIELD])])
        return samples

    def read_columns(self, runs, into=None) -> dict | None:
        """A window as columns: as its dataset's reader gives them, where it is of one;
        else each dataset's runs as columns (read as columns, or as samples whose fields
        are then gathered, as a batch of them would be), one after another."""
        groups = self._groups(runs)
        columns = []
        for number, local in groups:
            own = getattr(self.readers[number], "read_columns", None)
            window = own(local, into if len(groups) == 1 else None) if own else None
            if window is None and len(groups) > 1:
                window = _columns([sample for run in local for sample in self.read(
                    run.part + self.mixed.offsets[number], run.start, run.count)])
                columns.append(window)
                continue
            if window is None:
                return None
            columns.append(self._mapped(number, window))
        return columns[0] if len(columns) == 1 else _joined(columns)

    def read_window(self, runs, field: str):
        groups = self._groups(runs)
        own = getattr(self.readers[groups[0][0]], "read_window", None) if groups else None
        if len(groups) == 1 and own is not None:
            window = self._mapped(groups[0][0], own(groups[0][1], field))
            if window is not None:
                return window
        return [sample for run in runs for sample in self.read(run.part, run.start, run.count)]

    def _mapped(self, number: int, window):
        """A window as its dataset's reader gave it, class ids the mix's; None where its
        class column cannot be mapped at once."""
        ids = self.mixed.class_maps[number]
        if ids is None:
            return window
        if isinstance(window, list):
            for sample in window:
                if CLASS_FIELD in sample:
                    sample[CLASS_FIELD] = int(ids[int(sample[CLASS_FIELD])])
            return window
        if CLASS_FIELD in window:
            if not isinstance(window[CLASS_FIELD], np.ndarray):
                return None
            window = {**window, CLASS_FIELD: ids[window[CLASS_FIELD]]}
        return window

    def next_window(self) -> None:
        for reader in self.readers:
            if hasattr(reader, "next_window"):
                reader.next_window()

    def prefetch(self, runs) -> None:
        for number, local in self._groups(runs):
            own = getattr(self.readers[number], "prefetch", None)
            if own is not None:
                own(local)

    def close(self) -> None:
        for reader in self.readers:
            reader.close()


def _columns(samples: list[dict]) -> dict | None:
    """Samples with the same fields as {field: column}: ints as an int64 array, other
    values as a list; None where their fields differ."""
    names = samples[0].keys() if samples else ()
    if not samples or any(sample.keys() != names for sample in samples):
        return None
    out = {}
    for name in names:
        values = [sample[name] for sample in samples]
        ints = all(type(value) is int for value in values)
        out[name] = np.array(values, np.int64) if ints else values
    return out


def _joined(windows: list[dict | None]) -> dict | None:
    """Windows of columns one after another, where they have the same fields and each
    field's columns are int arrays or lists; else None."""
    if any(window is None or window.keys() != windows[0].keys() for window in windows):
        return None
    out = {}
    for name in windows[0]:
        columns = [window[name] for window in windows]
        if all(isinstance(column, np.ndarray) for column in columns):
            out[name] = np.concatenate(columns)
        elif all(isinstance(column, list) for column in columns):
            out[name] = [value for column in columns for value in column]
        else:
            return None
    return out
