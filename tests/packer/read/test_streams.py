"""streams=S: the same batches, in the same order, whatever packer.DataLoader's
num_workers; every sample once; a state_dict taken at one worker count resumes at
another to the batches the uninterrupted epoch gives."""

import pytest

import packer
from conftest import class_images, run
from packer.read import streams

STREAMS = 6


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """150 images of 5 classes in tar shards of 20, and as LMDB."""
    root = tmp_path_factory.mktemp("streams")
    class_images(root / "images", 5, 30)
    out = {fmt: root / fmt for fmt in ("webdataset", "lmdb")}
    for fmt, path in out.items():
        run("pack", root / "images", "--to", fmt, "-o", path, "--max-count", "20", "-q")
    return out


def keys(path, workers: int, decode: str = "raw", epoch: int = 1, **options) -> list[list[str]]:
    data = packer.open_dataset(path, shuffle=True, seed=5, decode=decode, streams=STREAMS,
                               image_size=8 if decode == "rgb8" else None, **options)
    data.set_epoch(epoch)
    loader = packer.DataLoader(data, batch_size=8, num_workers=workers)
    return [list(batch["__key__"]) for batch in loader]


@pytest.mark.parametrize("fmt", ["webdataset", "lmdb"])
@pytest.mark.parametrize("decode", ["raw", "rgb8"])  # batches as read, and decoded
def test_the_batches_are_the_same_for_any_number_of_workers(packed, fmt, decode):
    alone = keys(packed[fmt], 0, decode)
    assert sorted(k for batch in alone for k in batch) == sorted(
        k for batch in keys(packed[fmt], 0, decode, shuffle_buffer=4) for k in batch)
    assert len({k for batch in alone for k in batch}) == 150  # each sample once
    for workers in (1, 2, 4):
        assert keys(packed[fmt], workers, decode) == alone, workers
    assert keys(packed[fmt], 0, decode, epoch=2) != alone  # another epoch, another order


def test_without_streams_the_batches_follow_the_workers(packed):
    """The default: each worker reads a stretch of its own (the order differs by W)."""
    def default(workers):
        data = packer.open_dataset(packed["lmdb"], shuffle=True, seed=5, decode="raw")
        return [list(b["__key__"]) for b in packer.DataLoader(data, batch_size=8,
                                                              num_workers=workers)]

    assert default(0) != default(2)


def test_a_state_taken_at_two_workers_resumes_at_three_to_the_same_batches(packed):
    whole = keys(packed["webdataset"], 2)
    data = packer.open_dataset(packed["webdataset"], shuffle=True, seed=5, decode="raw",
                               streams=STREAMS)
    data.set_epoch(1)
    taken = []
    for batch in packer.DataLoader(data, batch_size=8, num_workers=2):
        taken.append(list(batch["__key__"]))
        if len(taken) == 7:
            break
    state = data.state_dict()
    assert state["num_workers"] == STREAMS  # counted stream by stream
    again = packer.open_dataset(packed["webdataset"], shuffle=True, seed=5, decode="raw",
                                streams=STREAMS)
    again.load_state_dict(state)
    rest = [list(b["__key__"]) for b in packer.DataLoader(again, batch_size=8, num_workers=3)]
    assert taken + rest == whole


def test_a_collate_fn_is_refused_with_streams(packed):
    data = packer.open_dataset(packed["lmdb"], decode="raw", streams=STREAMS)
    with pytest.raises(ValueError, match="batched by packer.DataLoader itself"):
        next(iter(packer.DataLoader(data, batch_size=8, collate_fn=list)))


def test_streams_are_dealt_to_the_workers_and_read_in_rounds():
    assert streams.of_worker(1, 3, 8) == [1, 4, 7]
    assert streams.of_worker(2, 2, None) == [2]  # no streams: the worker's own stretch
    made = {0: iter("abc"), 1: iter("x"), 2: iter("pq")}
    assert list(streams.in_rounds(made)) == [(0, "a"), (1, "x"), (2, "p"), (0, "b"),
                                             (2, "q"), (0, "c")]
    made = {0: iter("abc"), 2: iter("pq")}  # resumed where stream 0 had given a batch more
    assert list(streams.in_rounds(made, first=1)) == [(2, "p"), (0, "a"), (2, "q"), (0, "b"),
                                                      (0, "c")]
