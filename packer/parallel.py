"""An ordered, bounded parallel map: results come back in input order, and at most
a few chunks per worker are in flight, so memory does not grow with the input."""

import gc
import multiprocessing
from collections import deque
from collections.abc import Callable, Iterable, Iterator


def ordered_map(function: Callable, items: Iterable, workers: int) -> Iterator:
    """`map(function, items)` over `workers` processes (in this process when 1)."""
    if workers <= 1:
        yield from map(function, items)
        return
    # A forked worker keeps the garbage collector off what it inherits: walking those
    # objects would write to, and so copy, every page it shares with this process.
    with multiprocessing.get_context().Pool(workers, initializer=gc.freeze) as pool:
        pending: deque = deque()
        for item in items:
            pending.append(pool.apply_async(function, (item,)))
            if len(pending) >= 3 * workers:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()
