"""Batches made where the samples are decoded: in the DataLoader's workers (or its
threads), so that one tensor per field per batch crosses to the training process.

Stored pixels (`packer pack --encode raw`) come from the decoder as (H, W, 3) arrays that
share the bytes read; each is copied once, into its row of the batch's buffer, which in a
worker lies in shared memory (as torch's own collate puts it), so nothing is copied again on
the way to the training process. The batch's images are that buffer seen as (B, 3, H, W):
channels-last in memory, as convolutions on the CPU and on CUDA prefer.

A worker ships a batch's small tensors (class ids, short arrays) as numpy arrays inside the
batch's one pickle through the result pipe: torch would hand each tensor over as shared
memory by a file descriptor, at a socket connection per tensor, which costs more than
copying a small one. A batch's bytes values cross in slots too: where a tar reader read
its window into one (Spans of it), as where they lie; otherwise copied one after another
into one. The training process makes them bytes again from there: in the pickle they
would be copied into it, through the pipe and out of it.
"""

import gc
import os
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from typing import NamedTuple

import numpy as np
import torch
from torch.utils.data import default_collate, get_worker_info

from packer.formats.spans import Spans
from packer.read.ring import LANDING, SlotRef, worker_slots
from packer.sample import KEY


def batches(samples: Iterable[dict | None], size: int, drop_last: bool, collate) -> Iterator:
    """(batch, the positions it covers) of `samples` in batches of `size` (the last one
    shorter unless `drop_last`), each made by `collate(list of samples)`: what torch's
    fetcher makes of an IterableDataset.
    A None (a sample skipped with on_error="skip") counts in its batch's size but is
    left out of it: batches cover the same positions whatever fails, so that the count
    of batches says where an epoch is (an exact resume) and every rank gives as many;
    a batch whose every sample was skipped is None."""
    batch: list = []
    taken = 0
    for sample in samples:
        taken += 1
        if sample is not None:
            batch.append(sample)
        if taken == size:
            yield (collate(batch) if batch else None), taken
            batch, taken = [], 0
    if taken and not drop_last:
        yield (collate(batch) if batch else None), taken


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

    worker: int
    sizes: tuple[int, ...]
    batches: list

    def pin_memory(self, device=None):
        return self  # see Shipped.pin_memory


def handed_over(made: Iterable[tuple], worker: int | None, group: int) -> Iterator:
    """The (batch, positions) pairs `made`: in a DataLoader worker (its id), shipped in
    Handovers of up to `group` batches (GROUP_BYTES in slots, GROUP_PIPED pickled);
    elsewhere the batches as they are."""
    if worker is None:
        return (batch for batch, _ in made)
    return _handovers(made, worker, group)


def _handovers(made: Iterable[tuple], worker: int, group: int) -> Iterator[Handover]:
    batches_in, sizes, nbytes, piped = [], [], 0, 0
    for batch, size in made:
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


def in_turn(handovers: Iterable, counts: list[int]) -> Iterator[tuple]:
    """(batch, worker, positions) of the workers' `handovers` in the order torch gives
    batches: one of each worker's in turn, passing over those that have given their
    `counts` of batches (torch takes the items of its workers in turn, and a worker's
    handover holds a few batches). Batches past the counts come last, as they come."""
    waiting = [deque() for _ in counts]
    handovers = iter(handovers)
    for turn in range(max(counts, default=0)):
        for worker in (w for w, count in enumerate(counts) if turn < count):
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


def batch_buffer(shape: tuple[int, ...]) -> torch.Tensor:
    """A uint8 tensor for a batch: in one of the worker's shared slots inside a
    DataLoader worker (packer.read.ring)."""
    if get_worker_info() is None:
        return torch.empty(shape, dtype=torch.uint8)
    return worker_slots().tensor(shape)


def slot_buffer(nbytes: int) -> np.ndarray | None:
    """A uint8 array in one of the worker's free slots, for a window's bytes to be read
    into; None if none is free."""
    tensor = worker_slots().in_slot((nbytes,))
    return None if tensor is None else tensor.numpy()


def pixel_batch(values: list, field: str, keys: list[str]) -> torch.Tensor:
    """Images of one batch, each an (H, W, 3) uint8 array (or tensor), as one
    (B, 3, H, W) tensor whose rows were each written once."""
    shape = values[0].shape
    odd = next((i for i, value in enumerate(values) if value.shape != shape), None)
    if odd is not None:
        raise ValueError(f"the {field} images of a batch differ in size: {keys[0]!r} is "
                         f"{shape[1]}x{shape[0]}, {keys[odd]!r} {values[odd].shape[1]}x"
                         f"{values[odd].shape[0]}; pass image_size= to resize them")
    out = batch_buffer((len(values), *shape))
    rows = out.numpy()
    for row, value in zip(rows, values, strict=True):
        row[...] = value if isinstance(value, np.ndarray) else value.numpy()
    return out.permute(0, 3, 1, 2)


def collate_with_pixels(samples: list[dict], field: str, collate) -> dict:
    """A batch whose `field` holds stored pixels: those into one buffer, the other
    fields by `collate`."""
    keys = [sample[KEY] for sample in samples]
    pixels = pixel_batch([sample[field] for sample in samples], field, keys)
    # each image's row number stands in for it, so that `collate` sees every field
    rest = collate([{**sample, field: row} for row, sample in enumerate(samples)])
    rest[field] = pixels
    return rest


def consumed_per_worker(sizes: list[int], batch_size: int, drop_last: bool,
                        batches: int) -> list[int]:
    """Samples of each worker in the first `batches` batches of a DataLoader, which
    takes batches from its workers in turn, passing over those that have run out."""
    per_worker = [size // batch_size if drop_last else -(-size // batch_size) for size in sizes]
    consumed, round_ = [0] * len(sizes), 0
    while batches > 0 and round_ < max(per_worker, default=0):
        for worker, size in enumerate(sizes):
            if batches > 0 and round_ < per_worker[worker]:
                consumed[worker] += min(batch_size, size - round_ * batch_size)
                batches -= 1
        round_ += 1
    return consumed


def collate_samples(batch: list[dict]):
    """torch's default_collate, but samples of a batch must have the same fields:
    default_collate keeps the first sample's fields, so a sidecar that only some
    samples have would vanish from some batches and fail others."""
    if isinstance(batch[0], dict) and any(s.keys() != batch[0].keys() for s in batch):
        shapes = Counter(tuple(sorted(n for n in s if n != KEY)) for s in batch)
        if len(shapes) > 1:
            usual = shapes.most_common(1)[0][0]
            odd = next(s for s in batch if tuple(sorted(n for n in s if n != KEY)) != usual)
            raise ValueError(
                f"the samples of a batch have different fields: {odd.get(KEY)!r} has "
                f"{', '.join(n for n in odd if n != KEY)}, most have {', '.join(usual)}; "
                "drop the odd fields in a transform= (or pass collate_fn=) so that every "
                "sample has the same ones")
    return default_collate(batch)


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


_FROZEN_IN: set[int] = set()


def freeze_inherited_objects() -> None:
    """In a forked worker, keep the garbage collector off the objects inherited from
    the parent: walking them writes to their pages, which copies every page the
    parent shares (a third of a worker's time on raw reads). Elsewhere, nothing."""
    if get_worker_info() is not None and os.getpid() not in _FROZEN_IN:
        _FROZEN_IN.add(os.getpid())
        gc.freeze()
