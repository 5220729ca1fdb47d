"""packer.DataLoader: torch's DataLoader over a PackedDataset, which makes the batches
in its workers, knows how many were consumed (for an exact resume), and counts them."""

import multiprocessing

import numpy.random  # noqa: F401  torch seeds it in every worker: imported once, before they fork
import torch

from packer.read import ring
from packer.read.collate import collate_samples
from packer.read.forking import frozen_for_fork
from packer.read.handover import in_turn, landed, widen_result_pipe
from packer.read.loader import PackedDataset

_LOADER_ARGS = ("batch_size", "shuffle", "sampler", "batch_sampler", "num_workers",
                "collate_fn", "pin_memory", "drop_last", "timeout", "worker_init_fn",
                "multiprocessing_context", "generator")  # torch's DataLoader's, in order


# Handovers each worker makes ahead of the training process (torch's prefetch_factor,
# its default): each holds up to 8 batches that are quick to make (packer.read.handover),
# one that is not.
PREFETCH = 2


def _pass_on(batch):
    """The collate of a loader whose dataset yields whole batches."""
    return batch


class DataLoader(torch.utils.data.DataLoader):
    """A torch DataLoader that tells its PackedDataset how many batches were consumed,
    so that `dataset.state_dict()` can resume exactly where training stopped, and
    whose len() counts the batches it really gives: each worker ends its share of
    the epoch with a batch of its own, so there can be one short batch per worker.
    Without a collate_fn, batches are made by `collate_samples`: over a PackedDataset,
    by the dataset itself in each worker, which hands over whole batches (stored pixels
    written once, straight into the batch), so the training process only passes them on;
    each worker hands them over a few at a time, and works PREFETCH handovers ahead
    unless prefetch_factor= says."""

    def __init__(self, dataset, *args, **kwargs):
        kwargs.update(zip(_LOADER_ARGS, args, strict=False))
        batch_size, drop_last = kwargs.get("batch_size", 1), kwargs.get("drop_last", False)
        batching = batch_size is not None and kwargs.get("collate_fn") is None
        self._batches_from_dataset = batching and isinstance(dataset, PackedDataset)
        if self._batches_from_dataset:
            kwargs.update(batch_size=None, drop_last=False, collate_fn=_pass_on)
            if kwargs.get("num_workers", 0) > 0 and kwargs.get("prefetch_factor") is None:
                kwargs["prefetch_factor"] = PREFETCH  # torch's own default is 2
        elif batching:
            kwargs["collate_fn"] = collate_samples
        super().__init__(dataset, **kwargs)
        if self._batches_from_dataset:  # what the dataset's batches are (torch's are off)
            object.__setattr__(self, "batch_size", batch_size)
            object.__setattr__(self, "drop_last", drop_last)

    def __len__(self) -> int:
        if not isinstance(self.dataset, PackedDataset) or not self.batch_size:
            return super().__len__()
        # what is left of the epoch after a loaded state_dict, worker by worker
        return sum(self.dataset.worker_batches(self.dataset.plan_workers(max(self.num_workers, 1)),
                                               self.batch_size, self.drop_last))

    def __iter__(self):
        dataset = self.dataset
        tracking = isinstance(dataset, PackedDataset)
        workers = self.num_workers
        if tracking and dataset.streams and not self._batches_from_dataset:
            raise ValueError(f"a dataset of streams={dataset.streams} is batched by "
                             "packer.DataLoader itself: give batch_size, and no collate_fn "
                             "(a transform= of the dataset changes samples instead)")
        if self._batches_from_dataset:  # read by the workers (or the iterator) made now
            dataset.batch_as((self.batch_size, self.drop_last))
        forking = workers > 0 and self._forks() and \
            not (self.persistent_workers and self._iterator is not None)
        arenas = ring.map_arenas(workers) if forking else []
        try:
            with frozen_for_fork(workers):
                batches_in = super().__iter__()
        finally:
            ring.forked()
            if self._batches_from_dataset:
                dataset.batch_as(None)
        ring.LANDING.begin_epoch()
        try:
            yield from self._batches(batches_in, dataset, tracking, workers)
        finally:
            ring.LANDING.end_epoch()
            if not self.persistent_workers:
                ring.LANDING.forget_unused(arenas)

    def _forks(self) -> bool:
        """Whether the workers are forked (and so share what this process mapped)."""
        context = self.multiprocessing_context
        if context is not None:
            return context.get_start_method() == "fork"
        # not get_start_method(): it would fix the program's choice (the default first)
        return (multiprocessing.get_start_method(allow_none=True)
                or multiprocessing.get_all_start_methods()[0]) == "fork"

    def _batches(self, batches_in, dataset, tracking: bool, workers: int):
        widen_result_pipe(batches_in)
        pin = bool(getattr(batches_in, "_pin_memory", False))  # torch's: only where it can
        cut = dataset.plan_workers(workers) if tracking else workers
        if tracking:
            dataset.count_by_worker(cut if self._batches_from_dataset and workers else None)
        if self._batches_from_dataset and workers:
            handed = in_turn(batches_in, dataset.worker_batches(cut, self.batch_size,
                                                                self.drop_last),
                             dataset.first_stream(cut, self.batch_size))
        else:
            handed = ((batch, None, None) for batch in batches_in)
        for count, (batch, worker, size) in enumerate(handed, start=1):
            if worker is not None:
                dataset.delivered(worker, size)
            elif tracking:
                dataset.consumed(count, self.batch_size, cut, self.drop_last)
            if batch is not None:  # None: a batch whose every sample was skipped
                yield landed(batch, pin) if self._batches_from_dataset else batch
