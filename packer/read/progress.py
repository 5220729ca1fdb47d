"""Where a PackedDataset is in its epoch: its state_dict, and a resume from one, on the
same or another number of DataLoader workers and ranks (packer.read.elastic)."""

from packer.read import elastic, plan


class EpochProgress:
    """The part of PackedDataset that says what this rank reads this epoch and how far it
    has come. It uses the dataset's `order` (the epoch's sequence), `epoch`, `seed`,
    `shuffle`, `rank`, `world_size`, `remainder` and `window`; `_resume` (the loaded
    state), and the counts that packer.DataLoader reports through `count_by_worker`,
    `delivered` and `consumed` (`_emitted`, counted by the dataset, with num_workers=0)."""

    _resume: dict | None = None
    _folded: list | None = None  # `done` of the loaded state folded with its progress

    def plan_workers(self, workers: int) -> int:
        """The workers the epoch's plan is cut for: the dataset's streams, else the
        DataLoader's `workers` (packer.read.streams)."""
        return self.streams or workers

    def count_by_worker(self, workers: int | None) -> None:
        """packer.DataLoader begins an epoch whose batches it counts worker by worker
        (None: it counts torch's batches instead, through `consumed`)."""
        self._delivered = [0] * workers if workers else None

    def delivered(self, worker: int, samples: int) -> None:
        """packer.DataLoader has yielded a batch of `samples` of `worker`'s."""
        self._delivered[worker] += samples

    def consumed(self, batches: int, batch_size: int, workers: int, drop_last: bool) -> None:
        """packer.DataLoader has yielded `batches` of torch's batches this epoch."""
        self._consumed_batches = (batches, batch_size, workers, drop_last)

    def __len__(self) -> int:
        """The samples this rank yields in the epoch: after a loaded state, those of the
        plan that continues it (at the state's own worker count)."""
        return self._rank_size(None)

    def _rank_size(self, num_workers: int | None) -> int:
        done, _ = self._plan(num_workers)
        return plan.rank_size(elastic.left_count(done, self.order.total), self.world_size,
                              self.remainder)

    def worker_sizes(self, num_workers: int) -> list[int]:
        size = self._rank_size(num_workers)
        return [end - begin for begin, end in (plan.worker_span(size, w, num_workers)
                                               for w in range(num_workers))]

    def worker_batches(self, num_workers: int, batch_size: int, drop_last: bool) -> list[int]:
        """The batches each worker gives in this epoch (what is left after a resume)."""
        left = [size - self._skip(worker, num_workers)
                for worker, size in enumerate(self.worker_sizes(num_workers))]
        return [size // batch_size if drop_last else -(-size // batch_size) for size in left]

    def first_stream(self, num_workers: int, batch_size: int) -> int:
        """The worker of the plan (a stream) whose batch comes first in a resumed epoch,
        so that batches come in the order of a read that was never stopped: of those with
        samples left, the first to have given the fewest batches (0 for a fresh epoch, or
        a state cut afresh)."""
        _, skips = self._plan(num_workers)
        if not skips:
            return 0
        sizes = self.worker_sizes(num_workers)
        live = [w for w in range(num_workers) if sizes[w] > skips[w]]
        fewest = min((skips[w] // batch_size for w in live), default=0)
        return next((w for w in live if skips[w] // batch_size == fewest), 0)

    def _resumed(self) -> dict | None:
        """The loaded state, where it is of this epoch and past its start (a state taken
        before an epoch's first batch fits any plan)."""
        state = self._resume
        return state if state and state["epoch"] == self.epoch and (
            any(state["consumed"]) or state["done"]) else None

    def _plan(self, num_workers: int | None) -> tuple[list, list[int] | None]:
        """(the positions of the sequence left out, each worker's samples to pass over) of
        this epoch's plan at `num_workers` (None: the loaded state's own count). A state of
        this world size, worker count, window and remainder is continued worker by worker;
        another is folded (elastic.fold) and what is left is cut afresh."""
        state = self._resumed()
        if state is None:
            return [], None
        workers = state["num_workers"] if num_workers is None else max(num_workers, 1)
        if (state["world_size"], state["num_workers"], state["window"], state["remainder"]) \
                == (self.world_size, workers, self.window, self.remainder):
            return state["done"], state["consumed"]
        if self._folded is None:
            self._folded = elastic.fold(state, self.order.total, self.shuffle)
        return self._folded, None

    def _skip(self, worker: int, num_workers: int) -> int:
        _, skips = self._plan(num_workers)
        return skips[worker] if skips else 0

    def _runs(self, worker: int, num_workers: int) -> list[plan.Segment]:
        done, _ = self._plan(num_workers)
        return elastic.share(self.order.units(self.epoch), done, rank=self.rank,
                             world_size=self.world_size, worker=worker,
                             num_workers=num_workers, remainder=self.remainder)

    def state_dict(self) -> dict:
        """Where the epoch is: load it into a new dataset, on any number of ranks and
        workers, to continue with exactly the samples not yet seen. Progress is known when
        the dataset is read through `packer.DataLoader`, or in the main process
        (num_workers=0). Under DDP the state of one rank stands for every rank (they are
        at the same step)."""
        if self._delivered is not None:  # counted by packer.DataLoader, worker by worker
            workers, now = len(self._delivered), self._delivered
            done, skips = self._plan(workers)
        else:  # torch's batches of the samples, taken from the workers in turn
            batches, batch_size, workers, drop_last = self._consumed_batches or (
                self._emitted, 1, 0, False)
            workers = max(workers, 1)
            done, skips = self._plan(workers)
            left = [size - done_ for size, done_ in zip(self.worker_sizes(workers),
                                                         skips or [0] * workers, strict=True)]
            now = consumed_per_worker(left, batch_size, drop_last, batches)
        return {"version": elastic.STATE_VERSION, "epoch": self.epoch, "seed": self.seed,
                "rank": self.rank, "world_size": self.world_size, "num_workers": workers,
                "window": self.window, "remainder": self.remainder,
                "order": self.order.identity(), "dataset": self.order.text(),
                "done": done, "consumed": [a + b for a, b in zip(skips or [0] * workers, now,
                                                                 strict=True)]}

    def load_state_dict(self, state: dict) -> None:
        """Continue the epoch of `state` (this dataset's, taken at any worker count and
        world size); a state of another seed or dataset is refused, saying which."""
        if state["seed"] != self.seed:
            raise ValueError(f"the saved state has seed={state['seed']}, this dataset "
                             f"{self.seed}: resume with the seed it was taken with")
        if state.get("order", self.order.identity()) != self.order.identity():
            raise ValueError(f"the saved state is of another dataset or order "
                             f"({state.get('dataset')}); this one has "
                             f"{self.order.text()}: resume with the dataset and the "
                             "options (split, unit, holdout, shuffle) the state was taken "
                             "with")
        self._resume = {"done": [], "window": self.window, "remainder": self.remainder,
                        **state}
        self._folded = None
        self.epoch = state["epoch"]


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
