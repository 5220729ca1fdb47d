"""An HDF5 append writes a file of its own (out.h5.gen-000001.h5, ...) beside an index
file at OUT: the packed file is linked as generation 0, never written; plain h5py reads
every row through the index's virtual datasets; a missing or damaged generation file
is named; a kill before the index is swapped in leaves OUT as it was; packing again
removes the generation files; a dataset in a bucket fetches them beside it."""

import hashlib
import json
import subprocess
import sys

import h5py
import pytest

import packer
from conftest import run, source_files
from packer.errors import DatasetError
from packer.formats.hdf5 import generations
from packer.formats.manifests import local_manifest
from packer.packing.append import append_local
from packer.packing.options import PackOptions
from packer.sample import KEY


def _expected(*roots) -> dict[str, bytes]:
    return {rel.removesuffix(".jpg"): data for root in roots
            for rel, data in source_files(root).items()}


def _plain_h5py(out) -> dict[str, tuple[int, bytes]]:
    """Every row as a plain h5py user reads the file at OUT: (class id, bytes) by key."""
    with h5py.File(out, "r") as file:
        keys, labels, images = file[KEY][:], file["cls"][:], file["jpg"][:]
    return {key.decode(): (int(label), image.tobytes())
            for key, label, image in zip(keys, labels, images, strict=True)}


def _killed_at(monkeypatch, step: str, source, out) -> None:
    """An append of `source` interrupted where generations.py calls `step`."""

    def killed(*args):
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(generations, step, killed)
        with pytest.raises(KeyboardInterrupt):
            append_local(source, out, PackOptions())


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_an_hdf5_append_links_the_file_and_writes_one_of_its_own(three_sources, tmp_path):
    old, new, third = three_sources
    out = tmp_path / "out.h5"
    run("pack", old, "--to", "hdf5", "-o", out, "-q")
    digest, inode = _sha(out), out.stat().st_ino
    run("pack", new, "--append", out, "-q")
    first = tmp_path / "out.h5.gen-000000.h5"
    assert _sha(first) == digest and first.stat().st_ino == inode  # never written
    assert (tmp_path / "out.h5.gen-000001.h5").is_file()
    assert out.stat().st_size < 64 << 10  # the index: no rows of its own
    run("pack", third, "--append", out, "-q")
    assert sorted(p.name for p in tmp_path.glob("out*.h5")) == [
        "out.h5", "out.h5.gen-000000.h5", "out.h5.gen-000001.h5", "out.h5.gen-000002.h5"]
    expected = _expected(old, new, third)
    classes = local_manifest(out)["classes"]
    plain = _plain_h5py(out)
    assert {key: data for key, (_, data) in plain.items()} == expected
    assert all(classes[label] == key.split("/")[0] for key, (label, _) in plain.items())
    assert list(plain)[:6] == sorted(_expected(old))  # the packed rows first, in order
    samples = {s[KEY]: s["jpg"] for s in packer.open_dataset(out, decode="raw")}
    assert samples == expected
    loader = packer.DataLoader(packer.open_dataset(out, decode="raw", shuffle=True),
                               batch_size=4, num_workers=2)
    assert sorted(key for batch in loader for key in batch[KEY]) == sorted(expected)
    checked = json.loads(run("verify", out, "-q", "--json", "--against", old, "--against",
                             new, "--against", third).output)
    assert checked["ok"] and checked["count"] == 18
    run("unpack", out, "-o", tmp_path / "back", "-q")
    assert len(list((tmp_path / "back").rglob("*.jpg"))) == 18


def test_a_missing_or_damaged_generation_file_is_named(three_sources, tmp_path):
    old, new, _ = three_sources
    out = tmp_path / "out.h5"
    run("pack", old, "--to", "hdf5", "-o", out, "-q")
    run("pack", new, "--append", out, "-q")
    generation = tmp_path / "out.h5.gen-000001.h5"
    kept = generation.read_bytes()
    generation.write_bytes(kept[:len(kept) // 3])
    damaged = run("verify", out, "-q", expect=1).output
    assert "out.h5.gen-000001.h5" in damaged and "Traceback" not in damaged
    generation.unlink()
    for command in ("verify", "inspect"):
        missing = run(command, out, expect=1).output
        assert "out.h5.gen-000001.h5: missing" in missing, command
    with pytest.raises(DatasetError, match="out.h5.gen-000001.h5: missing"):
        packer.open_dataset(out)
    generation.write_bytes(kept)
    assert json.loads(run("verify", out, "-q", "--json").output)["ok"]


def test_a_kill_before_the_index_is_swapped_in_leaves_the_dataset(three_sources, tmp_path,
                                                                  monkeypatch):
    old, new, third = three_sources
    out = tmp_path / "out.h5"
    run("pack", old, "--to", "hdf5", "-o", out, "-q")
    run("pack", new, "--append", out, "-q")
    before = local_manifest(out)
    _killed_at(monkeypatch, "swap_in", third, out)
    assert (tmp_path / "out.h5.gen-000002.h5").exists()  # in place, but named by nothing
    assert local_manifest(out) == before
    assert {s[KEY] for s in packer.open_dataset(out, decode="raw")} == set(_expected(old, new))
    left = run("pack", third, "--append", out, "-q", expect=2).output
    assert "--resume" in left and "is as before" in left
    run("pack", third, "--append", out, "-q", "--resume")
    assert local_manifest(out)["count"] == 18
    assert {s[KEY]: s["jpg"] for s in packer.open_dataset(out, decode="raw")} == \
        _expected(old, new, third)


def test_packing_again_removes_the_generation_files(three_sources, tmp_path):
    old, new, _ = three_sources
    out = tmp_path / "out.h5"
    other = tmp_path / "other.h5"
    run("pack", old, "--to", "hdf5", "-o", out, "-q")
    run("pack", old, "--to", "hdf5", "-o", other, "-q")
    run("pack", new, "--append", out, "-q")
    run("pack", new, "--append", other, "-q")
    run("pack", new, "--to", "hdf5", "-o", out, "-q", "--overwrite")
    assert sorted(p.name for p in tmp_path.glob("*.h5")) == [
        "other.h5", "other.h5.gen-000000.h5", "other.h5.gen-000001.h5", "out.h5"]
    assert _plain_h5py(out).keys() == _expected(new).keys()
    assert len(packer.open_dataset(other)) == 16


def test_an_appended_dataset_in_a_bucket_fetches_its_generation_files(three_sources, tmp_path, s3):
    from packer.storage.client import client

    old, new, _ = three_sources
    out = tmp_path / "out.h5"
    run("pack", old, "--to", "hdf5", "-o", out, "-q")
    run("pack", new, "--append", out, "-q")
    for path in tmp_path.glob("out*.h5"):
        client().upload_file(str(path), s3, f"data/{path.name}")
    url = f"s3://{s3}/data/out.h5"
    read = {s[KEY]: s["jpg"] for s in packer.open_dataset(url, decode="raw",
                                                          cache_dir=tmp_path / "cache")}
    assert read == _expected(old, new)
    assert json.loads(run("verify", url, "-q", "--json").output)["ok"]
    client().delete_object(Bucket=s3, Key="data/out.h5.gen-000001.h5")
    missing = run("verify", url, "-q", expect=1).output
    assert "out.h5.gen-000001.h5: missing" in missing


def test_a_first_append_whose_inputs_are_all_skipped_keeps_every_row(three_sources, tmp_path):
    old, _, _ = three_sources
    out = tmp_path / "out.h5"
    run("pack", old, "--to", "hdf5", "-o", out, "-q")
    result = run("pack", old, "--append", out, "-q", "--on-duplicate", "skip")
    assert "appended 0 samples" in result.output
    assert {key: data for key, (_, data) in _plain_h5py(out).items()} == _expected(old)
    assert {s[KEY]: s["jpg"] for s in packer.open_dataset(out, decode="raw")} == _expected(old)
    assert all(part["file"] == "out.h5.gen-000000.h5" for part in local_manifest(out)["parts"])
    assert json.loads(run("verify", out, "-q", "--json").output)["ok"]


def test_datasets_named_alike_keep_files_of_their_own(three_sources, tmp_path):
    old, new, third = three_sources
    plain, suffixed = tmp_path / "out", tmp_path / "out.h5"
    run("pack", old, "--to", "hdf5", "-o", suffixed, "-q")
    run("pack", new, "--append", suffixed, "-q")
    run("pack", third, "--to", "hdf5", "-o", plain, "-q")
    run("pack", old, "--append", plain, "-q")
    run("pack", third, "--to", "hdf5", "-o", plain, "-q", "--overwrite")
    assert {key: data for key, (_, data) in _plain_h5py(suffixed).items()} == \
        _expected(old, new)
    assert json.loads(run("verify", suffixed, "-q", "--json").output)["ok"]


def test_a_percent_sign_in_the_dataset_s_name(three_sources, tmp_path):
    """libhdf5 reads a virtual source's file name as a format, where % starts a field."""
    old, new, _ = three_sources
    for name in ("50%.h5", "x%%y.h5"):
        out = tmp_path / name
        run("pack", old, "--to", "hdf5", "-o", out, "-q")
        run("pack", new, "--append", out, "-q")
        assert {key: data for key, (_, data) in _plain_h5py(out).items()} == \
            _expected(old, new)
        assert json.loads(run("verify", out, "-q", "--json").output)["ok"]


def test_a_damaged_index_is_named_never_a_crash(three_sources, tmp_path):
    """The index's virtual datasets map their rows through a global heap with no
    checksum: a flipped byte there crashed libhdf5 when verify opened them."""
    old, new, _ = three_sources
    out = tmp_path / "out.h5"
    run("pack", old, "--to", "hdf5", "-o", out, "-q")
    run("pack", new, "--append", out, "-q")
    kept = out.read_bytes()
    mapping = kept.index(b"out.h5.gen-000000.h5")  # the first dataset's first source
    named = 0
    for offset in range(mapping - 48, mapping + 300, 24):  # where it crashed, among others
        out.write_bytes(kept[:offset] + bytes([kept[offset] ^ 0xFF]) + kept[offset + 1:])
        checked = subprocess.run([sys.executable, "-m", "packer", "verify", str(out), "-q"],
                                 capture_output=True, text=True)
        assert checked.returncode in (0, 1), (offset, checked.returncode, checked.stderr)
        assert "Traceback" not in checked.stdout + checked.stderr, offset
        named += "the index's virtual datasets" in checked.stdout + checked.stderr
    assert named
    out.write_bytes(kept)
    assert {s[KEY]: s["jpg"] for s in packer.open_dataset(out, decode="raw")} == \
        _expected(old, new)


def test_a_retried_first_append_leaves_no_stray_link(three_sources, tmp_path, monkeypatch):
    old, new, _ = three_sources
    out = tmp_path / "out.h5"
    run("pack", old, "--to", "hdf5", "-o", out, "-q")
    _killed_at(monkeypatch, "swap_in", new, out)
    run("pack", new, "--append", out, "-q", "--resume")
    assert sorted(p.name for p in tmp_path.glob("out*")) == [
        "out.h5", "out.h5.gen-000000.h5", "out.h5.gen-000001.h5"]


def test_an_append_killed_after_its_swap_is_done(three_sources, tmp_path, monkeypatch):
    """Killed after the index was swapped in, before its staging folder was removed:
    the next append neither calls the dataset as before nor asks for --resume."""
    old, new, third = three_sources
    out = tmp_path / "out.h5"
    run("pack", old, "--to", "hdf5", "-o", out, "-q")
    _killed_at(monkeypatch, "remove", new, out)
    assert local_manifest(out)["count"] == 16
    run("pack", third, "--append", out, "-q")
    assert {s[KEY]: s["jpg"] for s in packer.open_dataset(out, decode="raw")} == \
        _expected(old, new, third)
    assert not (tmp_path / "out.h5.partial").exists()
