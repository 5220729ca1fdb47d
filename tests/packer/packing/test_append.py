"""`packer pack SOURCE --append DATASET`: new parts, merged classes, duplicate keys,
a killed append, verify --against every source, the loader, a reader of the old data."""

import json
import signal
import subprocess
import sys

import pytest

import packer
from conftest import KILL_AFTER_TWO_PARTS, class_images, run
from packer.formats import format_module
from packer.formats.manifests import _validator, local_manifest
from packer.sample import KEY

FORMATS = ["webdataset", "lmdb", "hdf5", "tfrecord"]


def _out(tmp_path, fmt):
    return tmp_path / ("out.h5" if fmt == "hdf5" else f"out-{fmt}")


@pytest.fixture
def sources(tmp_path):
    """`old`: c0, c1 (3 images each); `new`: c1 (000..003: three keys old has) and c2 (4)."""
    old = class_images(tmp_path / "old", 2, 3)
    new = class_images(tmp_path / "new", 2, 4)
    (new / "c0").rename(new / "c2")
    return old, new


def _samples(out):
    manifest = local_manifest(out)
    module = format_module(manifest["format"])
    return {s[KEY]: s for part in manifest["parts"] for s in module.read_part(out, manifest, part)}


@pytest.mark.parametrize("fmt", FORMATS)
def test_append_merges_classes_and_refuses_or_skips_duplicate_keys(fmt, sources, tmp_path):
    old, new = sources
    out = _out(tmp_path, fmt)
    run("pack", old, "--to", fmt, "-o", out, "-q", "--max-count", "2")
    before = local_manifest(out)
    refused = run("pack", new, "--append", out, "-q", expect=2)
    assert "c1/000, c1/001, c1/002" in refused.output and "--on-duplicate skip" in refused.output
    assert local_manifest(out) == before  # refused: the dataset is as it was
    result = run("pack", new, "--append", out, "-q", "--on-duplicate", "skip")
    assert "left out 3 already in it" in result.output
    manifest = local_manifest(out)
    assert manifest["count"] == 11
    assert manifest["classes"] == ["c0", "c1", "c2"]  # c2 new: the next id
    assert manifest["class_counts"] == [3, 4, 4]
    assert [{k: v for k, v in p.items() if k != "file"} for p in manifest["parts"]][
        :len(before["parts"])] == before["parts"]  # old parts kept (HDF5: now in a file named)
    assert manifest["appends"] == [{**manifest["appends"][0], "generation": 1, "count": 5,
                                    "skipped": 3, "first": 6}]
    assert {e["path"] for e in manifest["skipped"]} == {f"c1/00{i}.jpg" for i in range(3)}
    assert not list(_validator().iter_errors(manifest))  # the schema knows `appends`
    samples = _samples(out)
    assert samples["c1/003"]["cls"] == 1
    assert samples["c2/000"]["cls"] == 2 and samples["c0/000"]["cls"] == 0
    assert samples["c1/000"]["jpg"] == (old / "c1/000.jpg").read_bytes()  # the old one kept
    assert samples["c2/001"]["jpg"] == (new / "c2/001.jpg").read_bytes()
    assert len(list(packer.open_dataset(out, decode="raw"))) == 11
    assert json.loads(run("verify", out, "-q", "--json").output)["ok"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_killed_append_leaves_the_dataset_and_resumes(fmt, sources, tmp_path):
    old, new = sources
    class_images(tmp_path / "more", 2, 6)
    out = _out(tmp_path, fmt)
    run("pack", old, "--to", fmt, "-o", out, "-q", "--max-count", "3")
    before = local_manifest(out)
    args = ["pack", str(tmp_path / "more"), "--append", str(out), "-q", "--on-duplicate",
            "skip"]
    killed = subprocess.run([sys.executable, "-c", KILL_AFTER_TWO_PARTS, *args])
    assert killed.returncode == -signal.SIGKILL
    assert local_manifest(out) == before and len(_samples(out)) == 6
    run(*args, expect=2)  # the interrupted append is named, not started over silently
    run(*args, "--resume")
    manifest = local_manifest(out)
    assert manifest["count"] == 12 and manifest["appends"][0]["count"] == 6
    assert sorted(_samples(out)) == sorted(f"c{c}/{i:03d}" for c in range(2) for i in range(6))


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_reader_of_the_old_data_keeps_reading_it(fmt, sources, tmp_path):
    old, new = sources
    out = _out(tmp_path, fmt)
    run("pack", old, "--to", fmt, "-o", out, "-q")
    dataset = packer.open_dataset(out, decode="raw")
    epoch = iter(dataset)
    read = [next(epoch)]
    run("pack", new, "--append", out, "-q", "--on-duplicate", "skip")
    read += list(epoch)  # the epoch begun before reads the old samples, as they were
    assert [(s[KEY], s["jpg"]) for s in read] == [
        (f"c{c}/{i:03d}", (old / f"c{c}/{i:03d}.jpg").read_bytes())
        for c in range(2) for i in range(3)]
    assert len(packer.open_dataset(out, decode="raw")) == 11  # a new one reads all


def test_append_refuses_another_transform(sources, tmp_path):
    old, new = sources
    out = _out(tmp_path, "webdataset")
    run("pack", old, "-o", out, "-q")
    result = run("pack", new, "--append", out, "-q", "--resize", "8", expect=2)
    assert "--resize" in result.output and local_manifest(out)["count"] == 6


def test_verify_against_every_source_of_an_appended_dataset(sources, tmp_path):
    old, new = sources
    out = _out(tmp_path, "webdataset")
    run("pack", old, "-o", out, "-q")
    run("pack", new, "--append", out, "-q", "--on-duplicate", "skip")
    both = json.loads(run("verify", out, "-q", "--json", "--against", old,
                          "--against", new).output)
    assert both["ok"] and both["count"] == 11
    (new / "c2/001.jpg").write_bytes(b"changed")
    changed = json.loads(run("verify", out, "-q", "--json", "--against", old,
                             "--against", new, expect=1).output)
    assert any("c2/001.jpg" in p for p in changed["problems"])
    one = run("verify", out, "-q", "--against", old, expect=2).output
    assert "repeat --against for each" in one and str(new) in one
    shown = run("inspect", out).output
    assert f"appended: 5 samples from {new}" in shown and "(generation 1)" in shown
    run("unpack", out, "-o", tmp_path / "back", "-q")
    assert len(list((tmp_path / "back").rglob("*.jpg"))) == 11


def test_the_cli_takes_one_output_and_the_dataset_s_format(sources, tmp_path):
    old, new = sources
    out = _out(tmp_path, "lmdb")
    run("pack", old, "--to", "lmdb", "-o", out, "-q")
    assert "one of them" in run("pack", new, "-o", tmp_path / "x", "--append", out,
                                expect=2).output
    assert "one of them" in run("pack", new, expect=2).output
    assert "--on-duplicate is for --append" in run("pack", new, "-o", tmp_path / "x",
                                                   "--on-duplicate", "skip", expect=2).output
    assert "leave out --to" in run("pack", new, "--append", out, "--to", "hdf5",
                                   expect=2).output
    assert "no such dataset" in run("pack", new, "--append", tmp_path / "none",
                                    expect=2).output
    summary = json.loads(run("pack", new, "--append", out, "-q", "--json", "--on-duplicate",
                             "skip").output)
    assert summary["packed"] == 11 and summary["appended"]["count"] == 5
    assert summary["appended"]["generation"] == 1


def test_append_to_an_lmdb_map_that_is_full(sources, tmp_path, monkeypatch):
    """The dataset's map as small as its data: the append makes room for it and more."""
    import packer.formats.lmdb as lmdb_format

    monkeypatch.setattr(lmdb_format, "initial_map_size", lambda input_bytes: 64 << 10)
    old, new = sources
    out = _out(tmp_path, "lmdb")
    run("pack", old, "--to", "lmdb", "-o", out, "-q")
    run("pack", new, "--append", out, "-q", "--on-duplicate", "skip")
    run("pack", class_images(tmp_path / "third", 4, 1), "--append", out, "-q",
        "--on-duplicate", "skip")
    manifest = local_manifest(out)
    assert manifest["count"] == 12 and [a["generation"] for a in manifest["appends"]] == [1, 2]
    assert manifest["classes"] == ["c0", "c1", "c2", "c3"]
    assert len(_samples(out)) == 12
