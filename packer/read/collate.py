"""Batches made where the samples are decoded: in the DataLoader's workers (or its
threads), so that one tensor per field per batch crosses to the training process.

Stored pixels (`packer pack --encode raw`) come from the decoder as (H, W, 3) arrays that
share the bytes read; each is copied once, into its row of the batch's buffer, which in a
worker lies in shared memory (as torch's own collate puts it), so nothing is copied again on
the way to the training process (packer.read.handover). The batch's images are that buffer
seen as (B, 3, H, W): channels-last in memory, as convolutions on the CPU and on CUDA
prefer. Other fields go through torch's default_collate, with one rule of its own: the
samples of a batch have the same fields.
"""

from collections import Counter
from collections.abc import Iterable, Iterator

import numpy as np
import torch
from torch.utils.data import default_collate, get_worker_info

from packer.read.ring import worker_slots
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


def collate_with_pixels(samples: list[dict], field: str, collate) -> dict:
    """A batch whose `field` holds stored pixels: those into one buffer, the other
    fields by `collate`."""
    keys = [sample[KEY] for sample in samples]
    pixels = pixel_batch([sample[field] for sample in samples], field, keys)
    # each image's row number stands in for it, so that `collate` sees every field
    rest = collate([{**sample, field: row} for row, sample in enumerate(samples)])
    rest[field] = pixels
    return rest


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
