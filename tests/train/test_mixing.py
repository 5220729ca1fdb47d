"""train fit on several datasets mixed by weight (train.mixing), and --resume on another
number of workers or of torchrun processes."""

import json
import os
import socket
import subprocess
import sys

import pytest
import torch

from conftest import ROOT, colour_images
from conftest import run as packer_run
from train_cli import train

COMMON = ["--image-size", "16", "--batch-size", "16", "--lr", "3e-3", "--cache", "off"]


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    """a: red, green, blue in tar shards; b: red, green, yellow (c0, c1, c3) in an LMDB."""
    root = tmp_path_factory.mktemp("mixfit")
    colour_images(root / "a-images", [(220, 40, 40), (40, 200, 40), (40, 40, 220)], 24, 30)
    colour_images(root / "b-images", [(220, 40, 40), (40, 200, 40), (220, 220, 40)], 12, 30)
    (root / "b-images" / "c2").rename(root / "b-images" / "c3")
    packer_run("pack", root / "a-images", "-o", root / "a", "--max-count", "20", "-q")
    packer_run("pack", root / "b-images", "--to", "lmdb", "-o", root / "b", "-q")
    return root


def test_fit_on_two_datasets_mixed_by_weight(two, tmp_path):
    out = tmp_path / "run"
    train("fit", two / "a", two / "b", "--mix-weights", "0.75,0.25", "--out", out, "--epochs",
          "2", "--val-split", "0.25", "--workers", "2", *COMMON)
    best = torch.load(out / "last.pt", weights_only=True)
    assert best["config"]["mix"] == [str(two / "a"), str(two / "b")]
    assert best["config"]["mix_weights"] == [0.75, 0.25] and best["config"]["weights"] is None
    head = [v for k, v in best["model"].items() if k.endswith("weight")][-1]
    assert head.shape[0] == 4  # c0, c1, c2 of a; c3 only b has
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert lines[0]["val"]["samples"] == 18 + 9  # a quarter of each, each once
    # training: a 54, b 27; at 0.75 and 0.25 a is used up first, once, with 18 of b's
    assert lines[0]["train"]["ranks"][0]["samples"] == 54 + 18
    assert sum(lines[0]["val"]["confusion"][3]) == 3  # b's c3 (a quarter of 12), as c3


def test_weights_that_do_not_fit_the_datasets_are_refused(two, tmp_path):
    one = train("fit", two / "a", "--mix-weights", "0.7,0.3", "--out", tmp_path / "x", expect=2)
    assert "gives the proportions of several datasets, but one DATA is named" in one
    three = train("fit", two / "a", two / "b", "--mix-weights", "1,2,3", "--out", tmp_path / "x",
                  expect=2)
    assert "give one positive proportion per dataset (2 named)" in three
    assert not (tmp_path / "x").exists()


def test_resume_on_another_number_of_workers(two, tmp_path):
    out = tmp_path / "run"
    train("fit", two / "a", "--out", out, "--epochs", "1", "--workers", "0", *COMMON)
    train("fit", two / "a", "--out", out, "--epochs", "2", "--workers", "2", "--resume",
          *COMMON)
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == [1, 2]


def test_resume_under_torchrun_with_another_process_count(two, tmp_path):
    out = tmp_path / "run"
    train("fit", two / "a", "--out", out, "--epochs", "1", "--workers", "0", *COMMON)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
               "--master-port", str(port), "-m", "train", "fit", str(two / "a"), "--out",
               str(out), "--epochs", "2", "--workers", "1", "--resume", *COMMON]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [line["epoch"] for line in lines] == [1, 2]
    assert len(lines[1]["train"]["ranks"]) == 2  # the second epoch on two ranks
