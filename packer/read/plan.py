"""Which samples a rank and a worker read in an epoch, and in which order.

Pure bookkeeping, no I/O. The dataset is a list of parts (tar shards, LMDB or
HDF5 blocks) with sample counts. One epoch:

1. Cut every part into units of at most `unit` consecutive samples and shuffle
   the units with a generator seeded by (seed, epoch) (no shuffle: keep order).
2. Concatenate them into one sequence of N samples. Every rank takes an equal
   contiguous slice: N // R samples each with `remainder="drop"`, or ceil(N / R)
   with `remainder="pad"`, where the sequence wraps around to fill the last slice.
3. Each DataLoader worker takes a contiguous piece of its rank's slice.
4. The worker reads its piece in windows of `window` samples (long contiguous
   reads) and, when shuffling, emits each window in a permutation seeded by
   (seed, epoch, rank, worker, window number).

Every sample is read once per epoch across all ranks and workers (plus the
padding), every rank yields the same count, and a position in a worker's
sequence says exactly which samples came before it, so resuming is a skip.
"""

from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

REMAINDERS = ("pad", "drop")


@dataclass(frozen=True)
class Segment:
    """`count` consecutive samples of part `part`, from its sample `start`."""

    part: int
    start: int
    count: int


def holdout_units(runs: list[Segment], holdout: tuple[float, str] | None) -> list[Segment]:
    """The units of one side of a fixed split: `(0.1, "val")` keeps every tenth unit,
    spread evenly over the dataset, and `(0.1, "train")` the others."""
    if holdout is None:
        return runs
    fraction, side = holdout
    picked = [int((i + 1) * fraction) > int(i * fraction) for i in range(len(runs))]
    return [run for run, held in zip(runs, picked, strict=True) if held == (side == "val")]


def range_runs(part_counts: list[int], ranges: list, unit: int | None) -> list[Segment]:
    """The samples of `ranges` ([first, stop) of the whole dataset's indices, sorted: a
    split the manifest records) as runs of at most `unit` samples within a part."""
    starts = [0]
    for count in part_counts:
        starts.append(starts[-1] + count)
    runs = []
    for first, stop in ranges:
        while first < stop:
            part = bisect_right(starts, first) - 1
            end = min(stop, starts[part + 1])
            runs += [Segment(part, begin - starts[part], min(unit or end, end - begin))
                     for begin in range(first, end, unit or end - first)]
            first = end
    return runs


def units(part_counts: list[int], unit: int | None, shuffle: bool, seed: int,
          epoch: int, holdout: tuple[float, str] | None = None,
          ranges: list | None = None) -> list[Segment]:
    """The epoch's units: every part (or only the samples of `ranges`) cut into runs of at
    most `unit`, one side of `holdout` kept, shuffled by (seed, epoch)."""
    if ranges is None:
        runs = [Segment(p, start, min(unit or count, count - start))
                for p, count in enumerate(part_counts)
                for start in range(0, count, unit or max(count, 1))]
    else:
        runs = range_runs(part_counts, ranges, unit)
    runs = holdout_units(runs, holdout)
    if shuffle:
        order = np.random.default_rng([seed, epoch]).permutation(len(runs))
        runs = [runs[i] for i in order]
    return runs


def rank_size(total: int, world_size: int, remainder: str) -> int:
    """Samples every rank yields per epoch."""
    if remainder == "drop":
        return total // world_size
    return -(-total // world_size)


def worker_span(size: int, worker: int, num_workers: int) -> tuple[int, int]:
    """[begin, end) of a rank's `size` samples read by `worker` (sizes differ by <= 1)."""
    base, extra = divmod(size, num_workers)
    begin = worker * base + min(worker, extra)
    return begin, begin + base + (worker < extra)


def slice_runs(runs: list[Segment], begin: int, end: int) -> list[Segment]:
    """The runs covering positions [begin, end) of the sequence `runs` make, wrapping
    around past its end (the padding)."""
    total = sum(r.count for r in runs)
    out, position = [], 0
    while begin < end and total:
        for run in runs:
            lo, hi = max(begin, position), min(end, position + run.count)
            if lo < hi:
                out.append(Segment(run.part, run.start + lo - position, hi - lo))
            position += run.count
        begin = max(begin, position)
    return out


def worker_runs(part_counts: list[int], *, unit: int | None, shuffle: bool, seed: int,
                epoch: int, rank: int, world_size: int, worker: int, num_workers: int,
                remainder: str, holdout: tuple[float, str] | None = None) -> list[Segment]:
    """The runs `worker` of `rank` reads this epoch, in reading order."""
    return sequence_share(units(part_counts, unit, shuffle, seed, epoch, holdout), rank=rank,
                          world_size=world_size, worker=worker, num_workers=num_workers,
                          remainder=remainder)


def sequence_share(sequence: list[Segment], *, rank: int, world_size: int, worker: int,
                   num_workers: int, remainder: str) -> list[Segment]:
    """The runs of `sequence` (steps 2 and 3 above) that `worker` of `rank` reads."""
    size = rank_size(sum(r.count for r in sequence), world_size, remainder)
    begin, end = worker_span(size, worker, num_workers)
    return slice_runs(sequence, rank * size + begin, rank * size + end)


def windows(runs: list[Segment], window: int) -> Iterator[list[Segment]]:
    """`runs` cut into consecutive windows of `window` samples."""
    current, filled = [], 0
    for run in runs:
        start = run.start
        left = run.count
        while left:
            take = min(left, window - filled)
            current.append(Segment(run.part, start, take))
            start, left, filled = start + take, left - take, filled + take
            if filled == window:
                yield current
                current, filled = [], 0
    if current:
        yield current


def window_order(size: int, shuffle: bool, seed: int, epoch: int, rank: int, worker: int,
                 number: int) -> np.ndarray:
    """The order in which a window's samples are emitted."""
    if not shuffle:
        return np.arange(size)
    return np.random.default_rng([seed, epoch, rank, worker, number]).permutation(size)


def read_windows(reader, runs: list[Segment], window: int, order, skip: int = 0,
                 in_place: str | None = None, columns: bool = False, into=None):
    """(the samples of each window of `runs`, as `reader` reads them; the positions in
    it to emit, in `order(size, number=...)`), leaving out the first `skip` samples;
    with `columns`, as {field: column} where the reader's `read_columns` can (into the
    buffer `into(nbytes)` gives, if given).
    A reader with `prefetch(runs)` is told each window, and the next, before it reads
    one (packer.formats.readahead). With `in_place`, a reader with `read_window` reads
    each window itself, as columns or as samples whose field `in_place` may lie where
    it is until the reader is closed; it is told when each window begins
    (`next_window`)."""
    cut = list(windows(runs, window))
    prefetch = getattr(reader, "prefetch", None)
    own_window = getattr(reader, "read_window", None) if in_place else None
    own_columns = getattr(reader, "read_columns", None) if columns else None
    position, advised = 0, -1  # samples passed; the last window read ahead
    for number, runs_in in enumerate(cut):
        size = sum(run.count for run in runs_in)
        if position + size <= skip:
            position += size
            continue
        if prefetch is not None:
            for ahead in cut[max(number, advised + 1):number + 2]:
                prefetch(ahead)
            advised = number + 1
        if own_window is not None:
            reader.next_window()
            raw = own_window(runs_in, in_place)
        else:
            raw = own_columns(runs_in, into) if own_columns is not None else None
            if raw is None:
                raw = [s for run in runs_in for s in reader.read(run.part, run.start,
                                                                 run.count)]
        yield raw, order(size, number=number)[max(0, skip - position):]
        position += size
