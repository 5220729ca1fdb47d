"""Packing on a Ray cluster of two nodes started here (a head and a second node, one CPU
each): the same bytes, manifest and skip reasons as the local engine, a task whose worker
dies retried, a pack whose tasks keep failing or whose driver is killed left unpublished
and resumed."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import packer
from conftest import KILL_AFTER_TWO_PARTS, run
from packer.errors import UsageProblem
from packer.formats import FORMAT_NAMES
from packer.packing.options import PackOptions
from packer.read.dataset import iter_samples
from ray_cluster import cluster, cluster_nodes, free_port  # noqa: F401  (fixtures)
from s3_server import upload_folder

BYTE_REPRODUCIBLE = ("webdataset", "tfrecord")


def data_files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.name != "manifest.json"}


def comparable(manifest: dict) -> dict:
    """A manifest less what differs between any two runs (its time, its own digest)."""
    return {k: v for k, v in manifest.items() if k not in ("created", "manifest_sha256")}


@pytest.fixture
def mixed_folder(image_folder):
    """The image folder with a corrupt JPEG and an empty file: skip reasons to compare."""
    (image_folder / "cat" / "broken.jpg").write_bytes(b"not a jpeg at all")
    (image_folder / "dog" / "empty.png").write_bytes(b"")
    return image_folder


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_a_ray_pack_is_the_local_pack(fmt, mixed_folder, tmp_path, cluster):
    base = ["pack", mixed_folder, "--to", fmt, "--max-count", "4", "-q"]
    run(*base, "-o", tmp_path / "local")
    run(*base, "-o", tmp_path / "ray", "--engine", "ray", "--address", cluster)
    local, on_ray = packer.load_manifest(tmp_path / "local"), packer.load_manifest(tmp_path / "ray")
    assert comparable(local) == comparable(on_ray)
    assert {e["path"] for e in on_ray["skipped"]} >= {"cat/broken.jpg", "dog/empty.png"}
    if fmt in BYTE_REPRODUCIBLE:
        assert data_files(tmp_path / "local") == data_files(tmp_path / "ray")
    # and for every format: the parts' digests (above, in the manifests), the samples
    assert list(iter_samples(tmp_path / "local")) == list(iter_samples(tmp_path / "ray"))


def test_a_ray_pack_of_an_s3_prefix_is_the_local_pack(mixed_folder, tmp_path, cluster, s3):
    """The tasks read the objects themselves, on both nodes: a driver that read them
    could not, the read being patched out of this process."""
    import packer.sources.files.read as read

    upload_folder(mixed_folder, s3, "images")
    base = ["pack", "--max-count", "4", "-q"]
    run(*base, mixed_folder, "-o", tmp_path / "local")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(read, "fetch_object", None)  # the driver's copy: never called here
        run(*base, f"s3://{s3}/images", "-o", tmp_path / "ray", "--engine", "ray",
            "--address", cluster)
    local, on_ray = packer.load_manifest(tmp_path / "local"), packer.load_manifest(tmp_path / "ray")
    assert on_ray["source"].pop("path") == f"s3://{s3}/images"
    local["source"].pop("path")
    assert comparable(local) == comparable(on_ray)
    assert data_files(tmp_path / "local") == data_files(tmp_path / "ray")


def _dies_on(key: str, marker: Path | None):
    """A read_job for the files source whose worker process dies when its job holds the
    sample `key`: once (the first time, when `marker` is given), or every time."""
    from packer.sources.files.read import read_job

    def read_or_die(job):
        if any(sample[0] == key for sample in job[2]):
            if marker is None:
                os._exit(17)
            try:
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                os._exit(17)  # the first attempt only: the marker is there for the retry
            except FileExistsError:
                pass
        return read_job(job)

    return read_or_die


def _pack_with(monkeypatch, read_job, folder: Path, out: Path, cluster: str, expect=0):
    """`packer pack` on the cluster, its tasks reading with `read_job`."""
    import packer.packing.pipeline as pipeline
    import packer.packing.writing as writing

    scan_input = pipeline.open_source
    monkeypatch.setattr(writing, "CHUNK", 4)  # several tasks from a small folder
    monkeypatch.setattr(pipeline, "open_source",
                        lambda path, options: (scan_input(path, options)[0], read_job))
    return run("pack", folder, "-o", out, "--max-count", "3", "--engine", "ray", "--address",
               cluster, "-q", expect=expect)


def test_a_task_whose_worker_dies_is_retried(mixed_folder, tmp_path, cluster, monkeypatch):
    marker = tmp_path / "died-once"
    dies_once = _dies_on("cat/with space", marker)
    _pack_with(monkeypatch, dies_once, mixed_folder, tmp_path / "ray", cluster)
    assert marker.exists()  # a worker did die
    run("pack", mixed_folder, "--max-count", "3", "-o", tmp_path / "local", "-q")
    assert comparable(packer.load_manifest(tmp_path / "ray")) == comparable(
        packer.load_manifest(tmp_path / "local"))
    assert data_files(tmp_path / "ray") == data_files(tmp_path / "local")


def test_a_task_that_keeps_failing_stops_unpublished_and_resumes(mixed_folder, tmp_path,
                                                                   cluster, monkeypatch):
    out = tmp_path / "ray"
    failed = _pack_with(monkeypatch, _dies_on("dog/deep/er/多%2Edots%2Ein%2Ename", None),
                        mixed_folder, out, cluster, expect=1)
    assert "failed on the Ray cluster after 3 retries" in failed.output
    assert "--resume" in failed.output and "Traceback" not in failed.output
    assert not out.exists()
    progress = json.loads((tmp_path / "ray.partial" / "progress.json").read_text())
    assert progress["parts"] and progress["tally"]["next_input"] > 0
    monkeypatch.undo()
    args = ["pack", mixed_folder, "--max-count", "3", "-q"]
    resumed = run(*args, "-o", out, "--engine", "ray", "--address", cluster, "--resume")
    assert "packing again from the start" not in resumed.output
    run(*args, "-o", tmp_path / "local")
    assert data_files(out) == data_files(tmp_path / "local")
    assert "OK" in run("verify", out, "--against", mixed_folder, "-q").output


def test_a_killed_ray_driver_leaves_nothing_published_and_resumes(mixed_folder, tmp_path,
                                                                   cluster):
    out = tmp_path / "killed"
    args = ["pack", str(mixed_folder), "-o", str(out), "--max-count", "3", "-q", "--engine",
            "ray", "--address", cluster]
    killed = subprocess.run([sys.executable, "-c", KILL_AFTER_TWO_PARTS, *args])
    assert killed.returncode == -signal.SIGKILL
    assert not out.exists() and (tmp_path / "killed.partial" / "progress.json").exists()
    assert "packing again from the start" not in run(*args, "--resume").output
    run("pack", mixed_folder, "-o", tmp_path / "local", "--max-count", "3", "-q")
    assert data_files(out) == data_files(tmp_path / "local")


def test_what_the_ray_engine_refuses(image_folder, tmp_path):
    table = tmp_path / "t.csv"
    table.write_text("a,b,y\n1,2,0\n3,4,1\n")
    refused = run("pack", table, "--to", "hdf5", "--label-column", "y", "-o", tmp_path / "t.h5",
                  "--engine", "ray", expect=2)
    assert "as whole column blocks" in refused.output and not (tmp_path / "t.h5").exists()
    assert "--workers is for --engine local" in run(
        "pack", image_folder, "-o", tmp_path / "w", "--engine", "ray", "-j", "2",
        expect=2).output
    assert "pass --engine ray with it" in run(
        "pack", image_folder, "-o", tmp_path / "w", "--address", "auto", expect=2).output
    with pytest.raises(UsageProblem, match="pip install 'packer\\[ray\\]'"):
        _without_ray(image_folder, tmp_path)


def _without_ray(folder: Path, tmp_path: Path) -> None:
    saved = sys.modules.get("ray")
    sys.modules["ray"] = None  # `import ray` raises ImportError
    try:
        packer.pack(folder, tmp_path / "x", PackOptions(engine="ray", progress=False))
    finally:
        sys.modules["ray"] = saved


def test_an_unreachable_cluster_is_one_message(image_folder, tmp_path):
    result = run("pack", image_folder, "-o", tmp_path / "x", "--engine", "ray", "--address",
                 f"127.0.0.1:{free_port()}", expect=1)
    assert "cannot connect to a Ray cluster" in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "x").exists() and not (tmp_path / "x.partial").exists()
