"""How an append finds the keys a dataset holds without reading its samples: LMDB from
the head of each value, TFRecord from each part's .tfkeys (a part without one read
whole), HDF5 from the key dataset with only its heaps checked (an LMDB append's own
file: test_append_lmdb.py)."""

import json

import h5py
import pytest

from conftest import class_images, run
from packer.errors import DatasetError
from packer.formats import format_module
from packer.formats.manifests import local_manifest
from packer.sample import KEY


def _keys(out):
    manifest = local_manifest(out)
    module = format_module(manifest["format"])
    return [key for part in manifest["parts"] for key in module.part_keys(out, manifest, part)]


def _read_keys(out):
    manifest = local_manifest(out)
    module = format_module(manifest["format"])
    return [s[KEY] for part in manifest["parts"] for s in module.read_part(out, manifest, part)]


def test_lmdb_keys_come_from_the_head_of_each_value_not_a_decode(tmp_path, monkeypatch):
    import packer.formats.lmdb as lmdb_format

    out = tmp_path / "out"
    run("pack", class_images(tmp_path / "old", 2, 3), "--to", "lmdb", "-o", out, "-q",
        "--max-count", "4")
    expected = _read_keys(out)
    monkeypatch.setattr(lmdb_format, "decode_value", lambda value: pytest.fail("decoded"))
    assert _keys(out) == expected and len(expected) == 6


def test_an_lmdb_value_laid_out_otherwise_is_decoded_whole(tmp_path):
    import msgpack

    from packer.formats.msgpack_values import value_key

    assert value_key(msgpack.packb({KEY: "a/b", "jpg": b"x" * 9000})) == "a/b"
    assert value_key(msgpack.packb({KEY: "k" * 300, "cls": 1})) == "k" * 300  # str 16
    assert value_key(msgpack.packb({"jpg": b"x", KEY: "a/b"})) is None  # the key not first
    assert value_key(msgpack.packb({KEY: b"a/b"}, use_bin_type=True)) is None  # not a str


def test_tfrecord_keys_come_from_each_part_s_keys_file(tmp_path, monkeypatch):
    import packer.formats.tfrecord as tfrecord_format

    out = tmp_path / "out"
    run("pack", class_images(tmp_path / "old", 2, 3), "--to", "tfrecord", "-o", out, "-q",
        "--max-count", "4")
    expected = _read_keys(out)
    assert [json.loads(p.read_text()) for p in sorted(out.glob("*.tfkeys"))] == [
        expected[:4], expected[4:]]
    monkeypatch.setattr(tfrecord_format, "read_part", lambda *a: pytest.fail("records read"))
    assert _keys(out) == expected


def test_a_tfrecord_dataset_without_keys_files_is_appended_to_as_before(tmp_path):
    """A part packed before .tfkeys (or with one that does not match it) is read whole
    for its keys; the parts an append adds have theirs."""
    out = tmp_path / "out"
    run("pack", class_images(tmp_path / "old", 2, 3), "--to", "tfrecord", "-o", out, "-q",
        "--max-count", "4")
    (out / "part-000000.tfkeys").unlink()
    (out / "part-000001.tfkeys").write_text('["c1/001"]')  # lists 1 key of 2
    new = class_images(tmp_path / "new", 3, 4)
    refused = run("pack", new, "--append", out, "-q", expect=2)
    # all 6: c1/002 too, in the part whose .tfkeys is short
    assert "6 keys" in refused.output and "c0/000" in refused.output
    run("pack", new, "--append", out, "-q", "--on-duplicate", "skip")
    manifest = local_manifest(out)
    assert manifest["count"] == 12 and sorted(_keys(out)) == sorted(_read_keys(out))
    assert sorted(p.name for p in out.glob("*.tfkeys")) == [
        "part-000001.tfkeys", "part-000002.tfkeys", "part-000003.tfkeys"]
    added = [json.loads((out / f"part-00000{i}.tfkeys").read_text()) for i in (2, 3)]
    assert added[0] + added[1] == _read_keys(out)[6:] and len(added[0]) == 4


def test_hdf5_keys_check_only_the_heaps_the_keys_are_in(tmp_path):
    """A damaged heap of image bytes (which also holds the manifest attribute here, so
    the manifest is read before) is not walked for the keys."""
    from packer.formats.hdf5 import part_keys
    from packer.formats.hdf5.heaps import _heap_addresses, check_heaps

    out = tmp_path / "out.h5"
    run("pack", class_images(tmp_path / "old", 2, 30), "--to", "hdf5", "-o", out, "-q",
        "--max-count", "40")
    manifest, expected = local_manifest(out), _read_keys(out)
    with h5py.File(out, "r") as file:
        heap = min(set(_heap_addresses(out, file["jpg"])) - set(_heap_addresses(out, file[KEY])))
    with open(out, "r+b") as file:
        file.seek(heap + 16)  # the first object's header: index 0, size 0
        file.write(bytes(16))
    with pytest.raises(DatasetError, match=f"offset {heap:,} is damaged"):
        check_heaps(out)
    check_heaps(out, (KEY,))  # the keys' heaps are whole
    assert [k for part in manifest["parts"] for k in part_keys(out, manifest, part)] == expected


def test_a_tfrecord_keys_file_with_a_byte_changed_is_not_trusted(tmp_path):
    """Its sha256 is in the manifest: a key changed in it (the count the same) is read
    from the records instead, so the duplicate is still refused; verify names the file."""
    out = tmp_path / "out"
    old = class_images(tmp_path / "old", 2, 3)
    run("pack", old, "--to", "tfrecord", "-o", out, "-q", "--max-count", "4")
    listed = out / "part-000000.tfkeys"
    listed.write_text(listed.read_text().replace("c0/000", "c0/00X"))
    assert "c0/000" in _keys(out)
    refused = run("pack", old, "--append", out, "-q", expect=2)
    assert "c0/000" in refused.output
    failed = run("verify", out, expect=1).output
    assert "part-000000.tfkeys: its sha256 is not the manifest's keys_sha256" in failed
