"""Deterministic output, atomic runs, and resuming after a kill."""

import signal
import subprocess
import sys

import pytest

import packer
from conftest import KILL_AFTER_TWO_PARTS, run
from packer.formats import FORMAT_NAMES
from packer.read.dataset import iter_samples


def shard_bytes(folder):
    """Tar shards, or TFRecord parts and their indexes."""
    paths = [*folder.glob("shard-*.tar"), *folder.glob("part-*.tf*")]
    return {p.name: p.read_bytes() for p in sorted(paths)}


def test_any_worker_count_gives_byte_identical_shards(image_folder, tmp_path):
    run("pack", image_folder, "-o", tmp_path / "w1", "--max-count", "5", "-j", "1", "-q")
    run("pack", image_folder, "-o", tmp_path / "w3", "--max-count", "5", "-j", "3", "-q")
    one, three = shard_bytes(tmp_path / "w1"), shard_bytes(tmp_path / "w3")
    assert len(one) > 2 and one == three


@pytest.mark.parametrize("fmt", ["lmdb", "hdf5"])
def test_any_worker_count_gives_identical_content(fmt, image_folder, tmp_path):
    run("pack", image_folder, "--to", fmt, "-o", tmp_path / "w1", "-j", "1", "-q")
    run("pack", image_folder, "--to", fmt, "-o", tmp_path / "w2", "-j", "2", "-q")
    assert list(iter_samples(tmp_path / "w1")) == list(iter_samples(tmp_path / "w2"))


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_killed_pack_leaves_no_output_and_resumes_identically(fmt, image_folder, tmp_path,
                                                              monkeypatch):
    monkeypatch.setattr("packer.formats.protocol.BLOCK_COUNT", 3)  # as in the killed run
    out = tmp_path / "killed"
    args = ["pack", str(image_folder), "--to", fmt, "-o", str(out), "--max-count", "3", "-q"]
    killed = subprocess.run([sys.executable, "-c", KILL_AFTER_TWO_PARTS, *args])
    assert killed.returncode == -signal.SIGKILL
    assert not out.exists()
    assert (tmp_path / "killed.partial" / "progress.json").exists()

    refused = run(*args, expect=2)
    assert "--resume" in refused.output
    assert "packing again from the start" not in run(*args, "--resume").output
    assert not (tmp_path / "killed.partial").exists()

    reference = tmp_path / "reference"
    ref_args = ["pack", image_folder, "--to", fmt, "-o", reference, "--max-count", "3", "-q"]
    run(*ref_args)
    assert list(iter_samples(out)) == list(iter_samples(reference))
    resumed = packer.load_manifest(out)
    expected = packer.load_manifest(reference)
    assert resumed["parts"] == expected["parts"] and resumed["count"] == expected["count"]
    assert shard_bytes(out) == shard_bytes(reference)
    assert "OK" in run("verify", out, "--against", image_folder, "-q").output


def test_resume_refuses_a_changed_input(image_folder, tmp_path):
    out = tmp_path / "killed"
    args = ["pack", str(image_folder), "-o", str(out), "--max-count", "3", "-q"]
    subprocess.run([sys.executable, "-c", KILL_AFTER_TWO_PARTS, *args])
    (image_folder / "bird" / "README").write_bytes(b"edited after it was packed")
    assert "modified since the interrupted run" in run(*args, "--resume", expect=2).output
    (image_folder / "bird" / "new.txt").write_text("a file added to the listing")
    assert "changed since the interrupted run" in run(*args, "--resume", expect=2).output


def test_existing_output_needs_overwrite(image_folder, tmp_path):
    out = tmp_path / "o"
    run("pack", image_folder, "-o", out, "-q")
    assert "--overwrite" in run("pack", image_folder, "-o", out, expect=2).output
    run("pack", image_folder, "-o", out, "--to", "lmdb", "--overwrite", "-q")
    assert packer.load_manifest(out)["format"] == "lmdb"
    assert not list(out.glob("shard-*.tar"))


KILL_WITH_ROWS_OF_AN_UNSEALED_PART = """
import os, signal, sys
import packer.formats.protocol
import packer.packing.pipeline
from packer.formats import hdf5
seal, calls = hdf5.Hdf5Writer._seal_part, []
def write_rows_then_die(self, part):
    calls.append(1)
    if len(calls) == 3:  # two parts are sealed; this one's rows reach the file unflushed
        self._flush_buffer()
        os.kill(os.getpid(), signal.SIGKILL)
    seal(self, part)
hdf5.Hdf5Writer._seal_part = write_rows_then_die
packer.formats.protocol.BLOCK_COUNT = 3
from packer.cli import cli
cli(sys.argv[1:], prog_name="packer")
"""


def test_hdf5_resumes_after_a_kill_between_writing_rows_and_flushing(image_folder, tmp_path,
                                                                    monkeypatch):
    monkeypatch.setattr("packer.formats.protocol.BLOCK_COUNT", 3)  # as in the killed run
    out = tmp_path / "killed"
    args = ["pack", str(image_folder), "--to", "hdf5", "-o", str(out), "-q"]
    killed = subprocess.run([sys.executable, "-c", KILL_WITH_ROWS_OF_AN_UNSEALED_PART, *args])
    assert killed.returncode == -signal.SIGKILL
    run(*args, "--resume")
    run("pack", image_folder, "--to", "hdf5", "-o", tmp_path / "reference", "-q")
    assert list(iter_samples(out)) == list(iter_samples(tmp_path / "reference"))
    assert "OK" in run("verify", out, "--against", image_folder, "-q").output


def test_hdf5_that_cannot_be_read_back_is_packed_again_from_the_start(image_folder, tmp_path,
                                                                      monkeypatch):
    monkeypatch.setattr("packer.formats.protocol.BLOCK_COUNT", 3)  # as in the killed run
    out = tmp_path / "killed"
    args = ["pack", str(image_folder), "--to", "hdf5", "-o", str(out), "-q"]
    subprocess.run([sys.executable, "-c", KILL_AFTER_TWO_PARTS, *args])
    data = tmp_path / "killed.partial" / "data.h5"
    data.write_bytes(data.read_bytes()[:data.stat().st_size // 3])  # metadata past its end
    resumed = run(*args, "--resume").output
    assert "cannot be read back" in resumed and "packing again from the start" in resumed
    assert not (tmp_path / "killed.partial").exists()
    run("pack", image_folder, "--to", "hdf5", "-o", tmp_path / "reference", "-q")
    assert list(iter_samples(out)) == list(iter_samples(tmp_path / "reference"))
    assert "OK" in run("verify", out, "--against", image_folder, "-q").output
