"""Fork hygiene: the garbage collector kept off the objects a forked DataLoader worker
inherits from the training process.

A collection in a worker walks every object it inherited and writes to the pages that hold
them, so each page the two processes shared is copied (20 MB and more a worker, and a third
of a worker's time on raw reads). Python's advice for fork is gc.freeze: the training
process freezes its objects while the workers fork (`frozen_for_fork`), and each worker
freezes what it inherited before it reads (`freeze_inherited_objects`).
"""

import gc
import os
from contextlib import contextmanager

from torch.utils.data import get_worker_info


@contextmanager
def frozen_for_fork(workers: int):
    """The training process's objects out of the collector's reach while `workers`
    fork; not where the program freezes objects itself (unfreezing would undo that),
    nor with no workers (unfreezing moves every young object to the oldest generation)."""
    ours = workers > 0 and gc.get_freeze_count() == 0
    if ours:
        gc.freeze()
    try:
        yield
    finally:
        if ours:
            gc.unfreeze()


_FROZEN_IN: set[int] = set()


def freeze_inherited_objects() -> None:
    """In a forked worker, keep the garbage collector off the objects inherited from
    the parent: walking them writes to their pages, which copies every page the
    parent shares (a third of a worker's time on raw reads). Elsewhere, nothing."""
    if get_worker_info() is not None and os.getpid() not in _FROZEN_IN:
        _FROZEN_IN.add(os.getpid())
        gc.freeze()
