"""An epoch's order that is the same for any number of DataLoader workers: `streams=S`.

By default each worker of a rank reads its own stretch of the epoch (packer.read.plan), and
packer.DataLoader gives the workers' batches in turn, as torch does: another number of
workers makes other batches. With `streams=S`, the rank's share is cut into S streams as
if there were S workers; worker w of W reads the streams w, w + W, w + 2W ... and makes
their batches in rounds (a batch of each of its streams in turn), and packer.DataLoader
gives them in rounds of every stream, passing over those that have ended. So the batches,
and their order, depend on S, never on W (0 workers included: the reading process reads
every stream in rounds), and a state_dict counts each stream's progress: it resumes at any
W. Each stream ends with a batch of its own, so an epoch has up to S short batches: choose
S so that a stream holds many batches.
"""

from collections.abc import Iterator

_ENDED = object()


def of_worker(worker: int, workers: int, streams: int | None) -> list[int]:
    """The streams (the plan's workers) that `worker` of `workers` reads."""
    return list(range(worker, streams, workers)) if streams else [worker]


def in_rounds(made: dict[int, Iterator], first: int = 0) -> Iterator[tuple[int, object]]:
    """(stream, item) of every stream's items in rounds: one of each in turn, in the
    order of the streams, passing over those that have ended; the first round begins at
    stream `first` (a resumed epoch: where the last round stopped)."""
    live = list(made.items())  # in the order of the streams
    turn = [entry for entry in live if entry[0] >= first]
    while live:
        for entry in turn:
            item = next(entry[1], _ENDED)
            if item is _ENDED:
                live.remove(entry)
            else:
                yield entry[0], item
        turn = list(live)
