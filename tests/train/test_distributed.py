"""train fit across processes and machines: DDP with two gloo processes, and two nodes
(torchrun on loopback, one from object storage) each rank reading its share of every
epoch once."""

import json
import os
import socket
import subprocess
import sys
import zlib

import packer
from conftest import FIT_OPTIONS
from conftest import run as packer_run
from train.sides import held_out, packed_labels, stratified_sides


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_ddp_with_two_gloo_processes(colours, tmp_path):
    out = tmp_path / "ddp"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
               "--master-port", str(free_port()), "-m", "train", "fit", str(colours / "wds"),
               "--out", str(out), "--epochs", "2", *FIT_OPTIONS[:-2]]  # --lr auto: one rate
    result = subprocess.run(command, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("a range test of") == 1  # printed by rank 0 only
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in lines] == [1, 2]  # only rank 0 writes
    # 120 samples: small data, so 0.2 held out, split over the ranks, reduced
    assert lines[0]["val"]["samples"] == 24


def _training_side(data, **options) -> packer.PackedDataset:
    """The training side of --val-split 0.25 (stratified) as train fit reads it."""
    labels, parts = packed_labels(data, {})
    train_side, _ = stratified_sides(held_out(labels, 0.25, 0), parts.part_counts, 0)
    return packer.PackedDataset(parts, order=train_side, decode="raw", shuffle=True, seed=0,
                                **options)


def _expected_share(data, rank: int, epoch: int) -> dict:
    """What the loader plans for `rank` of two in `epoch` (train fit's defaults: seed 0)."""
    share = _training_side(data, rank=rank, world_size=2)
    share.set_epoch(epoch)
    keys = [sample["__key__"] for sample in share]
    return {"samples": len(keys), "keys_crc32_sum": sum(zlib.crc32(k.encode()) for k in keys),
            "keys": set(keys)}


def run_two_nodes(data, tmp_path, node_env=lambda node: {}) -> list[dict]:
    """`torchrun --nnodes 2`, one process per node, as on two machines (on loopback):
    the epochs' records of metrics.jsonl, once both nodes have finished."""
    endpoint = f"127.0.0.1:{free_port()}"
    nodes = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
         "--node-rank", str(node), "--rdzv-endpoint", endpoint, "-m", "train", "fit",
         str(data), "--out", str(tmp_path / f"node{node}"), "--epochs", "2",
         "--cache", "off", "--val-split", "0.25", *FIT_OPTIONS],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", **node_env(node)}) for node in (0, 1)]
    outputs = [node.communicate(timeout=300)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs[0][-2000:] + outputs[1][-2000:]
    assert "best epoch" in outputs[0]  # rank 0 reports and writes; rank 1 writes nothing
    assert not (tmp_path / "node1").exists()
    return [json.loads(line) for line in
            (tmp_path / "node0" / "metrics.jsonl").read_text().splitlines()]


def assert_each_rank_read_its_share(lines: list[dict], data) -> None:
    total = _training_side(data).total
    for epoch, record in enumerate(lines):
        expected = [_expected_share(data, rank, epoch) for rank in (0, 1)]
        assert record["train"]["ranks"] == [{k: e[k] for k in ("samples", "keys_crc32_sum")}
                                            for e in expected]
        assert not expected[0]["keys"] & expected[1]["keys"]  # each sample once, on one rank
        assert len(expected[0]["keys"] | expected[1]["keys"]) == total
    assert len(lines) == 2


def test_two_nodes_read_each_rank_share_once_per_epoch(colours, tmp_path):
    assert_each_rank_read_its_share(run_two_nodes(colours / "wds", tmp_path), colours / "wds")


def test_two_nodes_read_from_object_storage_through_each_node_cache(colours, s3, tmp_path):
    url = f"s3://{s3}/wds"
    packer_run("pack", colours / "images", "-o", url, "--max-count", "30", "-q")
    caches = [tmp_path / f"cache-node{node}" for node in (0, 1)]
    lines = run_two_nodes(url, tmp_path, lambda node: {"XDG_CACHE_HOME": str(caches[node])})
    assert_each_rank_read_its_share(lines, url)
    for cache in caches:  # each node downloaded into its own cache, only whole parts
        parts = [p for p in cache.rglob("shard-*.tar") if p.is_file()]
        assert parts and not [p for p in cache.rglob("*") if ".part-" in p.name]
