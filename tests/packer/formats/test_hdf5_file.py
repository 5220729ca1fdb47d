"""HDF5 packs into one file that h5py opens, its manifest in an attribute; datasets
packed earlier as a folder (manifest.json + data.h5) still open everywhere."""

import json
import shutil
import signal
import subprocess
import sys

import h5py
import pytest

import packer
from conftest import KILL_AFTER_TWO_PARTS, run, source_files
from packer.bench.measure import BenchOptions, bench
from packer.errors import DatasetError


def check_reads_everywhere(dataset, image_folder, tmp_path) -> list[dict]:
    """inspect, verify --against, unpack, open_dataset and bench all read `dataset`."""
    manifest = packer.load_manifest(dataset)
    assert f"hdf5, {manifest['count']:,} samples" in run("inspect", dataset).output
    assert "OK" in run("verify", dataset, "--against", image_folder, "-q").output
    restored = tmp_path / f"restored-{dataset.name}"
    run("unpack", dataset, "-o", restored, "-q")
    assert source_files(restored) == source_files(image_folder)
    loaded = packer.open_dataset(dataset, decode="raw")
    assert len(loaded) == manifest["count"] == len(list(loaded))
    report = bench([str(dataset)], BenchOptions(workers=[0], repeat=1, decode=False),
                   progress=lambda _: None)
    assert report["ceilings"][str(dataset)]["cat_samples_per_s"] > 0
    return list(packer.iter_samples(dataset))


def test_hdf5_is_one_file_that_h5py_opens(image_folder, tmp_path):
    out = tmp_path / "images.h5"
    run("pack", image_folder, "--to", "hdf5", "-o", out, "-q")
    assert out.is_file() and not (tmp_path / "images.h5.partial").exists()
    with h5py.File(out, "r") as file:
        manifest = json.loads(file.attrs["packer_manifest"])
        assert list(file.attrs["classes"]) == ["bird", "cat", "dog"]
        assert len(file["__key__"]) == len(file["cls"]) == manifest["count"]
    assert packer.load_manifest(out) == manifest
    check_reads_everywhere(out, image_folder, tmp_path)

    assert "--overwrite" in run("pack", image_folder, "--to", "hdf5", "-o", out,
                                expect=2).output
    run("pack", image_folder, "-o", out, "--overwrite", "-q")  # a folder of shards now
    assert out.is_dir() and packer.load_manifest(out)["format"] == "webdataset"


def test_a_dataset_packed_as_a_folder_still_opens(image_folder, tmp_path):
    new = tmp_path / "new.h5"
    run("pack", image_folder, "--to", "hdf5", "-o", new, "-q")
    old = tmp_path / "old.h5"  # the layout before: OUT/manifest.json and OUT/data.h5
    old.mkdir()
    shutil.copyfile(new, old / "data.h5")
    (old / "manifest.json").write_text(json.dumps(packer.load_manifest(new)))
    assert check_reads_everywhere(old, image_folder, tmp_path) == list(
        packer.iter_samples(new))
    run("pack", image_folder, "--to", "hdf5", "-o", old, "--overwrite", "-q")
    assert old.is_file() and list(packer.iter_samples(old)) == list(packer.iter_samples(new))


def test_a_killed_hdf5_pack_resumes_into_one_file(image_folder, tmp_path, monkeypatch):
    monkeypatch.setattr("packer.formats.protocol.BLOCK_COUNT", 3)  # as in the killed run
    out = tmp_path / "killed.h5"
    args = ["pack", str(image_folder), "--to", "hdf5", "-o", str(out), "-q"]
    killed = subprocess.run([sys.executable, "-c", KILL_AFTER_TWO_PARTS, *args])
    assert killed.returncode == -signal.SIGKILL
    assert not out.exists() and (tmp_path / "killed.h5.partial" / "data.h5").is_file()
    run(*args, "--resume")
    assert out.is_file() and not (tmp_path / "killed.h5.partial").exists()
    reference = tmp_path / "reference.h5"
    run("pack", image_folder, "--to", "hdf5", "-o", reference, "-q")
    assert list(packer.iter_samples(out)) == list(packer.iter_samples(reference))
    assert "OK" in run("verify", out, "--against", image_folder, "-q").output


def test_a_resume_keeps_the_parts_of_a_file_whose_allocation_end_is_short(
        image_folder, tmp_path, monkeypatch):
    """A writer killed after its last flush can leave blocks (a grown heap of image
    bytes) past the end of allocation its superblock records; HDF5 then refuses to
    read rows of the parts before ("addr overflow"), and the resume started over."""
    monkeypatch.setattr("packer.formats.protocol.BLOCK_COUNT", 3)
    out = tmp_path / "killed.h5"
    args = ["pack", str(image_folder), "--to", "hdf5", "-o", str(out)]
    subprocess.run([sys.executable, "-c", KILL_AFTER_TWO_PARTS, *args, "-q"])
    data = tmp_path / "killed.h5.partial" / "data.h5"
    with open(data, "r+b") as file:  # the superblock's end-of-allocation address
        file.seek(40)
        file.write((data.stat().st_size // 2).to_bytes(8, "little"))
    resumed = run(*args, "--resume")
    assert "from the start" not in resumed.output
    reference = tmp_path / "reference.h5"
    run("pack", image_folder, "--to", "hdf5", "-o", reference, "-q")
    assert list(packer.iter_samples(out)) == list(packer.iter_samples(reference))


def test_a_file_that_is_no_dataset_is_refused(tmp_path):
    plain = tmp_path / "plain.h5"
    with h5py.File(plain, "w") as file:
        file["x"] = [1, 2, 3]
    assert "not a packed dataset" in run("inspect", plain, expect=1).output


def test_a_damaged_object_header_is_named_by_every_command(image_folder, tmp_path):
    """Bytes flipped in the object header of a dataset of the file: h5py's own KeyError
    or RuntimeError becomes one message naming the file."""
    out = tmp_path / "ds.h5"
    run("pack", image_folder, "--to", "hdf5", "-o", out, "-q")
    with h5py.File(out, "r") as file:
        header = h5py.h5o.get_info(file["__key__"].id).addr
    data = bytearray(out.read_bytes())
    data[header:header + 16] = bytes(b ^ 0x5A for b in data[header:header + 16])
    out.write_bytes(bytes(data))
    for command in (["verify", out], ["bench", out, "--repeat", "1", "--workers", "0"]):
        result = run(*command, expect=1)
        assert "damaged" in result.output and str(out) in result.output
        assert "Traceback" not in result.output
    with pytest.raises(DatasetError, match="object header .*damaged"):
        packer.open_dataset(out)
