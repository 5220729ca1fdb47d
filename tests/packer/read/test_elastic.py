"""A state_dict taken at W workers x R ranks resumes at W' x R': every sample of the
epoch once across the ranks (packer.read.elastic, packer.read.progress)."""

import json
import os
import socket
import subprocess
import sys
from collections import Counter

import pytest

import packer
from conftest import ROOT, class_images, run
from packer.read import elastic
from packer.read.plan import Segment

BATCH = 4
OPTIONS = {"shuffle": True, "seed": 7, "decode": "raw", "unit": 8, "shuffle_buffer": 16}
# (W, R) -> (W', R'): every count from 1 to 4 on each side, growing and shrinking
PAIRS = [(1, 1, 4, 4), (4, 4, 1, 1), (2, 1, 3, 2), (3, 2, 2, 1), (4, 1, 1, 4), (1, 4, 4, 1),
         (2, 3, 3, 4), (3, 4, 2, 3), (1, 2, 2, 3), (2, 2, 4, 3), (4, 3, 1, 2), (3, 3, 3, 1),
         (2, 4, 1, 2), (1, 3, 4, 2), (4, 2, 3, 4), (2, 2, 2, 2)]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """150 JPEGs in 5 classes, packed into tar shards of 20 (uneven: 8 shards)."""
    root = tmp_path_factory.mktemp("elastic")
    class_images(root / "images", 5, 30)
    run("pack", root / "images", "-o", root / "wds", "--max-count", "20", "-q")
    return root / "wds"


def everything(path) -> list[str]:
    return [sample["__key__"] for sample in packer.iter_samples(path)]


def saved_state(path, workers: int, world: int, fraction: float = 0.5) -> tuple[dict, list]:
    """Rank 0 of `world` read through packer.DataLoader at `workers` workers up to about
    `fraction` of its epoch: (its state, as a checkpoint keeps it; its keys)."""
    ds = packer.open_dataset(path, rank=0, world_size=world, **OPTIONS)
    ds.set_epoch(3)
    loader = packer.DataLoader(ds, batch_size=BATCH, num_workers=workers)
    stop, seen = max(1, int(len(loader) * fraction)), []
    for number, batch in enumerate(loader, start=1):
        seen += batch["__key__"]
        if number == stop:
            break
    return json.loads(json.dumps(ds.state_dict())), seen


def read_so_far(path, state: dict) -> list[str]:
    """What every rank of the state's world delivered by then: each worker's first
    samples, as many as rank 0's (the ranks of DDP are at the same step)."""
    seen = []
    for rank in range(state["world_size"]):
        ds = packer.open_dataset(path, rank=rank, world_size=state["world_size"], **OPTIONS)
        ds.set_epoch(state["epoch"])
        for worker, count in enumerate(state["consumed"]):
            samples = ds.iter_worker(worker, state["num_workers"])
            seen += [next(samples)["__key__"] for _ in range(count)]
    return seen


def read_after(path, state: dict, workers: int, world: int) -> list[list[str]]:
    """Each new rank's keys for the rest of the epoch, state loaded on every rank."""
    ranks = []
    for rank in range(world):
        ds = packer.open_dataset(path, rank=rank, world_size=world, **OPTIONS)
        ds.load_state_dict(state)
        keys = [s["__key__"] for w in range(workers) for s in ds.iter_worker(w, workers)]
        assert len(keys) == sum(ds.worker_sizes(workers)) - sum(
            ds._skip(w, workers) for w in range(workers))
        ranks.append(keys)
    return ranks


@pytest.mark.parametrize(("workers", "world", "new_workers", "new_world"), PAIRS)
def test_a_state_resumes_on_other_workers_and_ranks_exactly_once(data, workers, world,
                                                                 new_workers, new_world):
    state, rank0 = saved_state(data, workers, world)
    before = read_so_far(data, state)
    assert Counter(rank0) <= Counter(before)  # the simulated ranks agree with rank 0's loader
    after = read_after(data, state, new_workers, new_world)
    assert len({len(keys) for keys in after}) == 1  # every new rank gives as many
    every, seen = everything(data), before + [key for keys in after for key in keys]
    assert set(seen) == set(every)
    # padding only: at most one repeat per rank of the old plan and of the new one
    assert len(seen) - len(every) <= (world - 1) + (new_world - 1)
    assert not set(before) & {key for keys in after for key in keys}  # nothing read twice


def test_a_resumed_state_resumes_again_elsewhere(data):
    state, _ = saved_state(data, 3, 2, 0.3)
    before = read_so_far(data, state)
    middle = packer.open_dataset(data, rank=0, world_size=1, **OPTIONS)
    middle.load_state_dict(state)
    loader, again = packer.DataLoader(middle, batch_size=BATCH, num_workers=2), []
    for number, batch in enumerate(loader, start=1):
        again += batch["__key__"]
        if number == 5:
            break
    second = json.loads(json.dumps(middle.state_dict()))
    assert second["done"] and second["num_workers"] == 2 and second["world_size"] == 1
    after = read_after(data, second, 4, 3)
    seen = before + again + [key for keys in after for key in keys]
    assert set(seen) == set(everything(data))
    assert len(seen) - len(set(seen)) <= 1 + 2  # the old world's padding, the new one's


def test_a_state_of_another_seed_or_dataset_is_refused_with_the_reason(data, tmp_path):
    state, _ = saved_state(data, 2, 1)
    other_seed = packer.open_dataset(data, **{**OPTIONS, "seed": 8})
    with pytest.raises(ValueError, match="seed=7, this dataset 8"):
        other_seed.load_state_dict(state)
    other_unit = packer.open_dataset(data, **{**OPTIONS, "unit": 4})
    with pytest.raises(ValueError, match="150 samples in 8 parts, units of 8.*units of 4"):
        other_unit.load_state_dict(state)
    run("pack", data.parent / "images", "-o", tmp_path / "wds", "--max-count", "30", "-q")
    other_parts = packer.open_dataset(tmp_path / "wds", **OPTIONS)
    with pytest.raises(ValueError, match="another dataset.*150 samples in 5 parts"):
        other_parts.load_state_dict(state)


def test_the_same_workers_and_ranks_continue_in_the_order_of_an_unbroken_read(data):
    whole = packer.open_dataset(data, **OPTIONS)
    whole.set_epoch(3)
    epoch = [k for batch in packer.DataLoader(whole, batch_size=BATCH, num_workers=2)
             for k in batch["__key__"]]
    state, seen = saved_state(data, 2, 1)
    resumed = packer.open_dataset(data, **OPTIONS)
    resumed.load_state_dict(state)
    rest = [k for batch in packer.DataLoader(resumed, batch_size=BATCH, num_workers=2)
            for k in batch["__key__"]]
    assert seen == epoch[:len(seen)] and set(rest) == set(epoch[len(seen):])
    assert len(rest) == len(epoch) - len(seen)


def test_the_folded_positions_are_what_each_worker_delivered():
    order = lambda size, number: list(reversed(range(size)))  # noqa: E731  last first
    positions = [Segment(0, 10, 6), Segment(0, 30, 4)]  # windows of 4: 10-13, 14-15+30-31
    assert elastic.delivered(positions, 4, 6, order) == [(10, 14), (30, 32)]
    assert elastic.merged([(30, 31), (10, 14), (31, 32), (12, 20)]) == [[10, 20], [30, 32]]
    assert elastic.rest([[0, 3], [5, 6]], 8) == [Segment(0, 3, 2), Segment(0, 6, 2)]
    sequence = [Segment(2, 0, 3), Segment(0, 5, 3)]
    assert elastic.runs_at(sequence, [Segment(0, 1, 4)]) == [Segment(2, 1, 2), Segment(0, 5, 2)]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


TWO_RANKS = """
import json, os, sys
import torch.distributed as dist
import packer
dist.init_process_group("gloo")
state = json.load(open(sys.argv[2]))
ds = packer.open_dataset(sys.argv[1], **json.loads(sys.argv[3]))
ds.load_state_dict(state)
keys = [k for b in packer.DataLoader(ds, batch_size=4, num_workers=2) for k in b["__key__"]]
with open(os.path.join(sys.argv[4], f"rank{dist.get_rank()}.json"), "w") as out:
    json.dump({"keys": keys, "world": dist.get_world_size()}, out)
dist.destroy_process_group()
"""


def test_torchrun_two_ranks_resume_a_state_of_one_rank_with_three_workers(data, tmp_path):
    state, _ = saved_state(data, 3, 1)
    before = read_so_far(data, state)
    (tmp_path / "state.json").write_text(json.dumps(state))
    (tmp_path / "resume.py").write_text(TWO_RANKS)
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
               "--master-port", str(free_port()), str(tmp_path / "resume.py"), str(data),
               str(tmp_path / "state.json"), json.dumps(OPTIONS), str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world"] for r in ranks] == [2, 2] and len(ranks[0]["keys"]) == len(ranks[1]["keys"])
    seen = before + ranks[0]["keys"] + ranks[1]["keys"]
    assert set(seen) == set(everything(data)) and len(seen) - 150 <= 1
