"""packer/read/plan.py on its own: pure bookkeeping, tested without a dataset."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packer.read.plan import (
    Segment,
    holdout_units,
    rank_size,
    read_windows,
    slice_runs,
    units,
    window_order,
    windows,
    worker_runs,
    worker_span,
)


def samples(runs) -> list[tuple[int, int]]:
    """(part, sample) of every sample the runs cover, in order."""
    return [(run.part, run.start + i) for run in runs for i in range(run.count)]


def every_sample(part_counts) -> list[tuple[int, int]]:
    return [(part, i) for part, count in enumerate(part_counts) for i in range(count)]


def test_units_cut_parts_in_order_without_shuffle():
    runs = units([5, 0, 3], unit=2, shuffle=False, seed=0, epoch=0)
    assert runs == [Segment(0, 0, 2), Segment(0, 2, 2), Segment(0, 4, 1), Segment(2, 0, 2),
                    Segment(2, 2, 1)]


def test_shuffled_units_depend_on_seed_and_epoch_only():
    one = units([100, 50], unit=8, shuffle=True, seed=3, epoch=1)
    assert one == units([100, 50], unit=8, shuffle=True, seed=3, epoch=1)
    assert one != units([100, 50], unit=8, shuffle=True, seed=3, epoch=2)
    assert one != units([100, 50], unit=8, shuffle=True, seed=4, epoch=1)
    assert sorted(samples(one)) == every_sample([100, 50])


def test_rank_size_pads_up_or_drops_down():
    assert rank_size(10, 3, "pad") == 4 and rank_size(10, 3, "drop") == 3
    assert rank_size(9, 3, "pad") == rank_size(9, 3, "drop") == 3


@given(st.integers(0, 1000), st.integers(1, 9))
def test_worker_spans_tile_a_rank_evenly(size, num_workers):
    spans = [worker_span(size, w, num_workers) for w in range(num_workers)]
    assert spans[0][0] == 0 and spans[-1][1] == size
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
    lengths = [end - begin for begin, end in spans]
    assert max(lengths) - min(lengths) <= 1


def test_slice_runs_wraps_around_past_the_end():
    runs = [Segment(0, 0, 3), Segment(1, 0, 2)]
    assert samples(slice_runs(runs, 4, 7)) == [(1, 1), (0, 0), (0, 1)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=6), st.integers(1, 4),
       st.integers(1, 4), st.sampled_from(["pad", "drop"]), st.booleans(),
       st.integers(0, 3))
def test_an_epoch_reads_every_sample_once_across_ranks_and_workers(
        part_counts, world_size, num_workers, remainder, shuffle, epoch):
    read = {}
    for rank in range(world_size):
        read[rank] = [s for worker in range(num_workers)
                      for s in samples(worker_runs(
                          part_counts, unit=4, shuffle=shuffle, seed=7, epoch=epoch,
                          rank=rank, world_size=world_size, worker=worker,
                          num_workers=num_workers, remainder=remainder))]
    total = sum(part_counts)
    assert {len(got) for got in read.values()} == {rank_size(total, world_size, remainder)}
    everything = [s for rank in range(world_size) for s in read[rank]]
    if remainder == "drop":
        assert len(set(everything)) == len(everything)
        assert len(everything) == total - total % world_size
    else:
        assert set(everything) == set(every_sample(part_counts))
        assert len(everything) - total < world_size  # only the padding repeats


def test_windows_cut_runs_without_losing_a_sample():
    runs = [Segment(0, 10, 5), Segment(3, 0, 4)]
    cut = list(windows(runs, 3))
    assert [sum(r.count for r in w) for w in cut] == [3, 3, 3]
    assert samples([r for w in cut for r in w]) == samples(runs)


def test_window_order_is_a_seeded_permutation():
    order = window_order(16, True, 1, 2, 0, 1, 5)
    assert sorted(order.tolist()) == list(range(16))
    assert np.array_equal(order, window_order(16, True, 1, 2, 0, 1, 5))
    assert not np.array_equal(order, window_order(16, True, 1, 2, 0, 1, 6))
    assert window_order(4, False, 1, 2, 0, 1, 5).tolist() == [0, 1, 2, 3]


class ListReader:
    def read(self, part, start, count):
        return [(part, start + i) for i in range(count)]


@pytest.mark.parametrize("skip", [0, 1, 3, 4, 9])
def test_read_windows_leaves_out_what_a_resume_has_seen(skip):
    runs = [Segment(0, 0, 5), Segment(1, 0, 4)]
    order = lambda size, number: np.arange(size)  # noqa: E731
    emitted = [raw[i] for raw, positions in read_windows(ListReader(), runs, 4, order,
                                                         skip=skip) for i in positions]
    assert emitted == samples(runs)[skip:]


def test_holdout_splits_units_into_two_sides_that_cover_all():
    runs = units([30], unit=1, shuffle=False, seed=0, epoch=0)
    val, train = holdout_units(runs, (0.1, "val")), holdout_units(runs, (0.1, "train"))
    assert len(val) == 3 and len(train) == 27
    assert sorted(samples(val + train)) == every_sample([30])
    assert holdout_units(runs, None) == runs
