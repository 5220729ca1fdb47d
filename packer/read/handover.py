"""How a worker's batches cross to the training process, and come out of it in torch's
order.

A worker ships a batch's small tensors (class ids, short arrays) as numpy arrays inside the
batch's one pickle through the result pipe: torch would hand each tensor over as shared
memory by a file descriptor, at a socket connection per tensor, which costs more than
copying a small one. Its large tensors lie in the worker's shared slots (packer.read.ring)
and cross as a reference to their slot. A batch's bytes values cross in slots too: where a
tar reader read its window into one (Spans of it), as where they lie; otherwise copied one
after another into one. The training process makes them bytes again from there: in the
pickle they would be copied into it, through the pipe and out of it.

Batches that are quick to make cross a few at a time (a Handover), with the positions of
the worker's share each covers, so that the training process counts how far each worker
has come (packer.read.progress) and gives the batches in the order torch would
(`in_turn`). The result pipe is widened so that a batch of raw bytes crosses in one write.
"""

from collections import deque
from collections.abc import Iterable, Iterator
from typing import NamedTuple

import numpy as np
import torch
from torch.utils.data import get_worker_info

from packer.formats.spans import Spans
from packer.read.ring import LANDING, SlotRef, worker_slots

SMALL_TENSOR = 64 << 10  # bytes: a tensor up to this size crosses inside the pickle


class Shipped(NamedTuple):
    """A batch on its way from a worker, its small tensors as numpy arrays (`arrays`),
    its tensors in the worker's slots as SlotRefs (`slotted`), its lists of bytes values
    in the worker's slots as SlotBytes (`packed`)."""

    batch: dict
    arrays: tuple[str, ...]
    slotted: tuple[str, ...] = ()
    packed: tuple[str, ...] = ()

    def pin_memory(self, device=None):
        """torch's pinning thread passes over a batch on its way: it would pin copies
        of a slot's storage and its counts, and the worker would never learn that the slot
        is free (`landed` pins the batch's tensors instead)."""
        return self


def shipped(batch):
    """In a DataLoader worker: the batch ready to cross (elsewhere: as it is)."""
    if get_worker_info() is None or not isinstance(batch, dict):
        return batch
    tensors = {n: v for n, v in batch.items() if isinstance(v, torch.Tensor)
               and v.device.type == "cpu" and not v.requires_grad}
    arrays = tuple(n for n, v in tensors.items() if v.is_contiguous()
                   and v.nbytes <= SMALL_TENSOR)
    out = {n: v.numpy() if n in arrays else v for n, v in batch.items()}
    slots = worker_slots()
    refs = {n: slots.ref(v) for n, v in tensors.items() if n not in arrays}
    out.update((n, ref) for n, ref in refs.items() if ref is not None)
    packed = {n: _bytes_in_slot(v, slots) for n, v in batch.items() if _all_bytes(v)}
    packed.update((n, _spans_crossing(v, slots)) for n, v in batch.items() if _all_spans(v))
    out.update((n, values) for n, values in packed.items() if values is not None)
    return Shipped(out, arrays, tuple(n for n, ref in refs.items() if ref is not None),
                   tuple(n for n, values in packed.items() if values is not None))


class SlotBytes(NamedTuple):
    """A batch's bytes values as they cross: where each one starts and ends in the
    slots they lie in, slot by slot (rather than copied into the pickle, through the
    result pipe and out of it)."""

    pieces: list[tuple[SlotRef, np.ndarray, np.ndarray]]

    @property
    def nbytes(self) -> int:
        return sum(int((ends - starts).sum()) for _, starts, ends in self.pieces)


def _all_bytes(value) -> bool:
    return isinstance(value, list) and bool(value) and all(type(v) is bytes for v in value)


def _all_spans(value) -> bool:
    return isinstance(value, list) and bool(value) and all(type(v) is Spans for v in value)


def _bytes_in_slot(values: list[bytes], slots) -> SlotBytes | None:
    """Bytes values copied one after another into a slot (None if none is free)."""
    ends = np.cumsum(np.fromiter(map(len, values), np.int64, len(values)))
    into = slots.in_slot((int(ends[-1]),)) if ends[-1] else None
    if into is None:
        return None
    view, start = memoryview(into.numpy()), 0
    for value, end in zip(values, ends.tolist(), strict=True):
        view[start:end] = value
        start = end
    return SlotBytes([(slots.ref(into), np.concatenate([[0], ends[:-1]]), ends)])


def _spans_crossing(spans: list[Spans], slots) -> SlotBytes | list[bytes]:
    """Values that a reader read into slots (Spans of them), as they cross."""
    buffers = [torch.from_numpy(span.buffer) for span in spans]
    if not all(map(slots.holds, buffers)):  # not read into a slot: copied, as bytes
        return [value for span in spans for value in span.values()]
    return SlotBytes([(slots.ref(buffer), span.starts, span.ends)
                      for buffer, span in zip(buffers, spans, strict=True)])


def _landed_bytes(packed: SlotBytes) -> list[bytes]:
    values: list[bytes] = []
    for ref, starts, ends in packed.pieces:
        values += LANDING.values(ref, starts, ends)
    return values


def landed(batch, pin: bool = False):
    """A shipped batch as tensors again (sharing the arrays' and slots' memory), pinned
    if asked (torch's pinning thread passes over numpy arrays and slots)."""
    LANDING.release()
    if not isinstance(batch, Shipped):
        return batch
    out = batch.batch
    for name in batch.arrays:
        tensor = torch.from_numpy(out[name])
        out[name] = tensor.pin_memory() if pin else tensor
    for name in batch.slotted:
        tensor = LANDING.tensor(out[name])
        out[name] = tensor.pin_memory() if pin else tensor
    for name in batch.packed:
        out[name] = _landed_bytes(out[name])
    return out


# A worker hands batches that are quick to make (nothing to decode) over a few at a time:
# torch's cost for each item it passes (about 0.1 ms of the training process's time, and
# as much of the worker's) is then paid once for them; packer.DataLoader gives them in
# torch's order all the same. Decoded batches go one by one.
GROUP = 8  # batches handed over together, at most


GROUP_BYTES = 1 << 20  # of their tensors and bytes values in slots, at most


GROUP_PIPED = 512 << 10  # of bytes values in the pickle (no slot was free), at most


class Handover(NamedTuple):
    """Batches a worker hands over together, with the positions of its samples each
    covers (skipped samples too): the training process counts exactly how far into
    each worker's share of the epoch it has gone (PackedDataset.state_dict)."""

    worker: int  # of the plan: the DataLoader worker, or a stream (packer.read.streams)
    sizes: tuple[int, ...]
    batches: list

    def pin_memory(self, device=None):
        return self  # see Shipped.pin_memory


def handed_over(made: Iterable[tuple[int, tuple]], in_worker: bool, group: int) -> Iterator:
    """The batches of `made`, (worker of the plan, (batch, positions)) each: in a
    DataLoader worker, shipped in Handovers of up to `group` consecutive batches of one
    worker of the plan (GROUP_BYTES in slots, GROUP_PIPED pickled); elsewhere the batches
    as they are."""
    if not in_worker:
        return (batch for _, (batch, _) in made)
    return _handovers(made, group)


def _handovers(made: Iterable[tuple[int, tuple]], group: int) -> Iterator[Handover]:
    batches_in, sizes, nbytes, piped, worker = [], [], 0, 0, None
    for of, (batch, size) in made:
        if batches_in and of != worker:
            yield Handover(worker, tuple(sizes), batches_in)
            batches_in, sizes, nbytes, piped = [], [], 0, 0
        worker = of
        batches_in.append(shipped(batch))
        sizes.append(size)
        in_slots, in_pickle = _weight(batch, batches_in[-1])
        nbytes, piped = nbytes + in_slots, piped + in_pickle
        if len(batches_in) == group or nbytes >= GROUP_BYTES or piped >= GROUP_PIPED:
            yield Handover(worker, tuple(sizes), batches_in)
            batches_in, sizes, nbytes, piped = [], [], 0, 0
    if batches_in:
        yield Handover(worker, tuple(sizes), batches_in)


def _weight(batch, crossing) -> tuple[int, int]:
    """(bytes of tensors and copied values in slots, bytes of values in the pickle) of a
    batch as it crosses; values read into a window's slot weigh nothing (the window
    holds them anyway)."""
    in_slots = in_pickle = 0
    sent_as = crossing.batch if isinstance(crossing, Shipped) else batch or {}
    packed = crossing.packed if isinstance(crossing, Shipped) else ()
    for name, value in (batch or {}).items():
        sent = sent_as[name]
        if isinstance(value, torch.Tensor):
            in_slots += value.nbytes
        elif name in packed and not _all_spans(value):
            in_slots += sent.nbytes
        elif _all_bytes(sent):
            in_pickle += sum(map(len, sent))
    return in_slots, in_pickle


def in_turn(handovers: Iterable, counts: list[int], first: int = 0) -> Iterator[tuple]:
    """(batch, worker, positions) of the workers' `handovers` in the order torch gives
    batches: one of each worker's in turn, passing over those that have given their
    `counts` of batches (torch takes the items of its workers in turn, and a worker's
    handover holds a few batches); the first turn begins at worker `first` (a resumed
    epoch: where the last turn stopped). Batches past the counts come last, as they
    come."""
    waiting = [deque() for _ in counts]
    handovers = iter(handovers)
    for turn in range(max(counts, default=0) + (first > 0)):
        for worker in (w for w, count in enumerate(counts)
                       if (turn - (first > 0 and w < first)) in range(count)):
            while not waiting[worker]:
                handover = next(handovers, None)
                if handover is None:
                    yield from (entry for queue in waiting for entry in queue)
                    return
                waiting[handover.worker].extend(_entries(handover))
            yield waiting[worker].popleft()
    yield from (entry for queue in waiting for entry in queue)
    for handover in handovers:
        yield from _entries(handover)


def _entries(handover: Handover) -> Iterator[tuple]:
    for batch, size in zip(handover.batches, handover.sizes, strict=True):
        yield batch, handover.worker, size


_F_SETPIPE_SZ = 1031  # Linux


def widen_result_pipe(iterator) -> None:
    """Let the pipe that carries batches from the workers hold 1 MB, not 64 KB: a batch
    of raw bytes (300 KB for 64 small JPEGs) then crosses in one write instead of five
    handovers between processes (a quarter faster on 2 cores). Where the platform or
    torch's internals differ, nothing changes."""
    queue = getattr(iterator, "_worker_result_queue", None)
    try:
        import fcntl

        fcntl.fcntl(queue._reader.fileno(), _F_SETPIPE_SZ, 1 << 20)
    except (ImportError, AttributeError, OSError, ValueError):
        pass
