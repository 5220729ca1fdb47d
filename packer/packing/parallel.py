"""An ordered, bounded parallel map: results come back in input order, and at most
a few chunks per worker are in flight, so memory does not grow with the input. The
engine decides where the map runs: worker processes on this machine, or Ray tasks
(packer/packing/ray_engine.py)."""

import ctypes
import gc
import os
import signal
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import partial

ENGINES = ("local", "ray")


@contextmanager
def engine_map(engine: str, workers: int, address: str | None):
    """The ordered map of the engine: `workers` processes here (`local`), or tasks on
    the Ray cluster at `address` (`ray`; a local instance when None)."""
    if engine == "ray":
        from packer.packing.ray_engine import ray_cluster

        with ray_cluster(address) as ray_map:
            yield ray_map
    else:
        yield partial(ordered_map, workers=workers)


def ordered_map(function: Callable, items: Iterable, workers: int) -> Iterator:
    """`map(function, items)` over `workers` processes (in this process when 1)."""
    if workers <= 1:
        yield from map(function, items)
        return
    import multiprocessing  # here: a run in one process spares importing it

    with multiprocessing.get_context().Pool(workers, initializer=_start_worker,
                                            initargs=(os.getpid(),)) as pool:
        pending: deque = deque()
        for item in items:
            pending.append(pool.apply_async(function, (item,)))
            if len(pending) >= 3 * workers:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()


_PR_SET_PDEATHSIG = 1  # Linux's prctl option: a signal for this process when its parent dies


def _start_worker(parent: int) -> None:
    """A worker dies with the process that started it: a worker orphaned by the OOM
    killer must not go on writing spool files that a resumed run could read. Ctrl-C,
    which the terminal sends to every process of its group, is the main process's to
    answer: it stops the workers and says what is kept, and the workers say nothing."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # not Linux: the spool files' names and checksums still guard a resume
    if os.getppid() != parent:  # the parent died before the prctl
        os._exit(1)
    tune_for_packing()


def tune_for_packing() -> None:
    """Set up a process that packs (the CLI's, and every worker). The objects it has
    so far are kept out of the garbage collector's walks: in a forked worker, walking
    what it inherits would write to, and so copy, every page it shares with its
    parent; in any process, each full collection would walk every imported module
    again. And freed buffers are reused (below)."""
    gc.freeze()
    reuse_freed_buffers()


_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


def reuse_freed_buffers() -> None:
    """Have glibc serve buffers of up to 32 MB from its heap, not from fresh memory
    maps: packing makes and frees a buffer of a few MB per chunk of samples, and every
    fresh map costs page faults and zeroing (a tenth of packing time). Where the C
    library is not glibc, nothing changes."""
    try:
        ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, 32 << 20)
    except (OSError, AttributeError):
        pass
