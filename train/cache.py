"""The decoded training set kept in memory (`--cache`): decoded once, then batches come
from RAM.

The first epoch reads through the loader as without a cache and keeps each batch
(images as uint8, arrays in their own types) and each sample's key. A later epoch of
one process serves the kept samples in the order the loader would read them: a
second loader of the same order reads only the samples' keys (undecoded, with the
same workers), so that `--cache ram` and `--cache off` train on the same batches and
reach the same weights (a damaged sample the loader replaced is left out of its
batch). Under torchrun each rank keeps the share it read in the first epoch, and
later epochs shuffle those samples with a permutation drawn from (seed, epoch), so
every epoch still covers the training set once across ranks, with the same batch
count on every rank; so do a loose folder's. A resumed run refills the cache by
reading the first epoch's order again before it continues, so it reaches the same
weights as a run that never stopped.
"""

import math

import psutil
import torch

KEY = "__key__"  # the sample key, which training does not need
MEMORY_SHARE = 3  # the cache may take up to 1/3 of the memory available at the start


def available_memory() -> int:
    """Bytes of memory available to this process now (the figure --cache auto uses)."""
    return psutil.virtual_memory().available


def decide(mode: str, samples: int, sample_bytes: int) -> tuple[bool, str]:
    """Whether to cache `samples` samples of about `sample_bytes` each, and why."""
    need = samples * sample_bytes
    budget = available_memory() // MEMORY_SHARE
    size = f"{need / 2 ** 20:,.1f} MB for {samples:,} decoded training samples"
    if mode == "off":
        return False, f"off (asked): {size}"
    if mode == "ram":
        return True, f"in RAM (asked): {size}"
    if need <= budget:
        return True, f"in RAM: {size}, within a third of the available memory " \
                     f"({budget / 2 ** 20:,.0f} MB)"
    return False, f"off: {size}, more than a third of the available memory " \
                  f"({budget / 2 ** 20:,.0f} MB)"


class RamCache:
    """The batches of one rank's first epoch, concatenated; then batches drawn from them.
    The validation set is kept the same way (its samples in their order)."""

    def __init__(self, batch_size: int):
        self.batch_size = batch_size
        self.tensors: dict[str, torch.Tensor] | None = None
        self.index: dict[str, int] = {}  # a kept sample's key -> its row

    @property
    def full(self) -> bool:
        return self.tensors is not None

    def __len__(self) -> int:
        count = next(iter(self.tensors.values())).shape[0] if self.tensors else 0
        return math.ceil(count / self.batch_size)

    def fill(self, loader):
        """Yield the loader's batches while keeping them; full once the loader ends."""
        kept: dict[str, list] = {}
        keys = []
        for batch in loader:
            for name, value in batch.items():
                if name != KEY:
                    kept.setdefault(name, []).append(torch.as_tensor(value))
            keys += batch.get(KEY) or []
            yield batch
        self.tensors = {name: torch.cat(parts) for name, parts in kept.items()}
        self.index = {key: row for row, key in enumerate(keys)}

    def batches(self, generator: torch.Generator | None = None):
        """Every kept sample once, in batches, in an order drawn from `generator` (None:
        the order they were read in, as validation reads them)."""
        count = next(iter(self.tensors.values())).shape[0]
        order = torch.arange(count) if generator is None else torch.randperm(
            count, generator=generator)
        for begin in range(0, count, self.batch_size):
            index = order[begin:begin + self.batch_size]
            yield {name: values[index] for name, values in self.tensors.items()}

    def batches_in(self, key_batches):
        """The kept samples in the batches of keys `key_batches` gives: the order the
        loader reads them in (--deterministic). A key not kept (a damaged sample, which
        the loader replaced by another) is left out of its batch."""
        for batch in key_batches:
            rows = torch.tensor([self.index[k] for k in batch[KEY] if k in self.index],
                                dtype=torch.long)
            if len(rows):
                yield {name: values[rows] for name, values in self.tensors.items()}
