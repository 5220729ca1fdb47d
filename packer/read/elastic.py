"""The epoch's one order, whatever the workers and ranks, and what a state_dict says was
read of it: a resume on another number of DataLoader workers or of GPUs.

Pure bookkeeping, no I/O. The epoch's order is a *sequence* of N positions: the units of
packer.read.plan (or of several datasets, packer.read.mix) one after another, shuffled by
(seed, epoch). It depends on neither the workers (W) nor the ranks (R). A *plan* cuts
what is left of the sequence among R ranks and W workers as plan.py does (a contiguous
slice per rank, a piece of it per worker, read in windows emitted in an order seeded by
rank and worker); with nothing left out, that is the plan of an epoch read from its start.

A state records, for the plan in force, the positions it leaves out (`done`: sorted
[begin, end) ranges of the sequence) and how many samples each of its workers has
delivered (`consumed`). Under DDP every rank is at the same step, so the counts of the
rank that saved the state (rank 0) are those of every rank. A resume

- at the same W and R continues each worker where it stopped, in the order of a read
  that was never stopped;
- at another W' or R' adds what each old worker of each old rank delivered to `done`
  (its whole windows, and the first samples of the window it was in, in that window's
  order) and cuts the rest among the new ranks and workers.

    sequence  |u7     |u2     |u5     |u0     |u3     |u6     |u1     |u4     |  units
    R=2, W=2  |rank 0, worker 0 |worker 1     |rank 1, worker 0 |worker 1     |
    done      |####             |##           |####             |##           |
    R'=3      the rest, cut again: rank 0 | rank 1 | rank 2  (W' workers each)
"""

import hashlib
import json
from functools import partial

import numpy as np

from packer.read import plan
from packer.read.plan import Segment

STATE_VERSION = 2  # states without `done` (version 1) read as if nothing was left out


class Order:
    """The sequence of one dataset's units for an epoch (plan.units)."""

    def __init__(self, part_counts: list[int], unit: int | None, shuffle: bool, seed: int,
                 holdout=None, ranges: list | None = None, split: str | None = None):
        self.part_counts, self.unit, self.shuffle, self.seed = part_counts, unit, shuffle, seed
        self.holdout, self.ranges, self.split, self._identity = holdout, ranges, split, None
        self.total = sum(run.count for run in self.units(0, shuffled=False))

    def units(self, epoch: int, shuffled: bool = True) -> list[Segment]:
        return plan.units(self.part_counts, self.unit, self.shuffle and shuffled, self.seed,
                          epoch, self.holdout, self.ranges)

    def text(self) -> str:
        """How a state names the dataset this order is of, in a refusal."""
        split = f"split {self.split!r}, " if self.split is not None else ""
        return (f"{split}{self.total:,} samples in {len(self.part_counts):,} parts, units of "
                f"{self.unit or 'whole parts'}, shuffle={self.shuffle}")

    def identity(self) -> str:
        """A digest of what fixes the sequence apart from (seed, epoch): a state is for
        the dataset whose order has its identity."""
        if self._identity is None:
            units = [(run.part, run.start, run.count) for run in self.units(0, shuffled=False)]
            self._identity = hashlib.sha256(json.dumps([units, self.shuffle]).encode()
                                            ).hexdigest()[:16]
        return self._identity


def rest(done: list, total: int) -> list[Segment]:
    """The positions of [0, total) outside `done`, as runs of "part" 0."""
    out, at = [], 0
    for begin, end in done:
        if begin > at:
            out.append(Segment(0, at, begin - at))
        at = max(at, end)
    if at < total:
        out.append(Segment(0, at, total - at))
    return out


def runs_at(sequence: list[Segment], positions: list[Segment]) -> list[Segment]:
    """The runs of parts that lie at `positions` of `sequence`."""
    starts = np.cumsum([0] + [run.count for run in sequence])
    out = []
    for piece in positions:
        low, high = piece.start, piece.start + piece.count
        at = int(np.searchsorted(starts, low, side="right")) - 1
        while low < high:
            run, offset = sequence[at], low - int(starts[at])
            take = min(high - low, run.count - offset)
            out.append(Segment(run.part, run.start + offset, take))
            low, at = low + take, at + 1
    return out


def delivered(positions: list[Segment], window: int, count: int, order) -> list[tuple]:
    """The ranges of positions of the first `count` samples a worker delivers of its
    `positions`, read in windows of `window` emitted in `order(size, number=)`."""
    out, at = [], 0
    for number, runs in enumerate(plan.windows(positions, window)):
        if at >= count:
            break
        size = sum(run.count for run in runs)
        if count - at >= size:
            out += [(run.start, run.start + run.count) for run in runs]
        else:
            flat = np.concatenate([np.arange(run.start, run.start + run.count) for run in runs])
            out += ranges_of(flat[order(size, number=number)[:count - at]])
        at += size
    return out


def ranges_of(positions: np.ndarray) -> list[tuple[int, int]]:
    """Positions as sorted [begin, end) ranges."""
    unique = np.unique(positions)
    if not len(unique):
        return []
    cuts = np.flatnonzero(np.diff(unique) != 1) + 1
    begins, ends = unique[np.r_[0, cuts]], unique[np.r_[cuts - 1, len(unique) - 1]] + 1
    return list(zip(begins.tolist(), ends.tolist(), strict=True))


def merged(ranges) -> list[list[int]]:
    out: list[list[int]] = []
    for begin, end in sorted(ranges):
        if out and begin <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([begin, end])
    return out


def fold(state: dict, total: int, shuffle: bool) -> list[list[int]]:
    """`done` after the plan of `state`: what it left out, and what every worker of every
    rank delivered of it (each rank as far as the rank that saved the state)."""
    left = rest(state.get("done", []), total)
    ranges = [tuple(r) for r in state.get("done", [])]
    for rank in range(state["world_size"]):
        for worker, count in enumerate(state["consumed"]):
            positions = plan.sequence_share(
                left, rank=rank, world_size=state["world_size"], worker=worker,
                num_workers=state["num_workers"], remainder=state["remainder"])
            order = partial(plan.window_order, shuffle=shuffle, seed=state["seed"],
                            epoch=state["epoch"], rank=rank, worker=worker)
            ranges += delivered(positions, state["window"], count, order)
    return merged(ranges)


def share(sequence: list[Segment], done: list, *, rank: int, world_size: int, worker: int,
          num_workers: int, remainder: str) -> list[Segment]:
    """The runs `worker` of `rank` reads of `sequence` when `done` is left out."""
    if not done:
        return plan.sequence_share(sequence, rank=rank, world_size=world_size, worker=worker,
                                   num_workers=num_workers, remainder=remainder)
    total = sum(run.count for run in sequence)
    positions = plan.sequence_share(rest(done, total), rank=rank, world_size=world_size,
                                    worker=worker, num_workers=num_workers, remainder=remainder)
    return runs_at(sequence, positions)


def left_count(done: list, total: int) -> int:
    return total - sum(end - begin for begin, end in done)
