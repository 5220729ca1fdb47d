"""Packing binary dumps: values equal to an independent struct decoding, every format."""

import json
import struct
import wave
from pathlib import Path

import numpy as np
import pytest
from dumps import decoded, write_imu

import packer
from conftest import run
from packer.formats import FORMAT_NAMES
from packer.read.dataset import iter_samples


def big_endian_spec(tmp_path):
    from importlib import resources

    text = (resources.files("packer.sources.binary") / "specs" / "imu.toml").read_text()
    path = tmp_path / "imu-be.toml"
    path.write_text(text.replace('byte_order = "little"', 'byte_order = "big"'))
    return str(path)


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
@pytest.mark.parametrize("order", ["little", "big"])
def test_imu_records_equal_struct_unpack(fmt, order, tmp_path):
    dump = tmp_path / "imu.bin"
    expected = write_imu(dump, 50, order)
    spec = "imu" if order == "little" else big_endian_spec(tmp_path)
    out = tmp_path / "out"
    run("pack", dump, "--spec", spec, "--to", fmt, "-o", out, "--label-field", "status", "-q")
    samples = decoded(out)
    assert len(samples) == 50
    for sample, row in zip(samples, expected, strict=True):
        assert int(sample["timestamp_ns.npy"]) == row[0]
        assert sample["accel.npy"].tolist() == list(row[1:4])
        assert sample["gyro.npy"].tolist() == list(row[4:7])
        assert sample["cls"] == row[7]
    manifest = packer.load_manifest(out)
    assert manifest["source"]["byte_order"] == order and manifest["classes"] == ["0", "1", "2"]
    assert manifest["fields"]["accel.npy"]["dtype"] == "float32"
    assert "OK" in run("verify", out, "-q").output


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_windows_of_records(fmt, tmp_path):
    dump = tmp_path / "imu.bin"
    expected = write_imu(dump, 40, "little")
    out = tmp_path / "w"
    run("pack", dump, "--spec", "imu", "--to", fmt, "-o", out, "--window", "8", "--stride", "4",
        "--label-field", "status", "-q")
    samples = decoded(out)
    assert len(samples) == 9  # (40 - 8) // 4 + 1
    third = samples[2]
    assert third["accel.npy"].shape == (8, 3)
    assert third["accel.npy"].tolist() == [list(r[1:4]) for r in expected[8:16]]
    assert third["cls"] == expected[15][7]  # the window's last record


def test_truncated_dump_is_refused_or_cut(tmp_path):
    dump = tmp_path / "imu.bin"
    write_imu(dump, 10, "little", trailing=b"\x01" * 28)
    refused = run("pack", dump, "--spec", "imu", "-o", tmp_path / "o", expect=1).output
    assert "28 trailing bytes" in refused and "--tail drop" in refused
    assert not (tmp_path / "o").exists() and not (tmp_path / "o.partial").exists()
    run("pack", dump, "--spec", "imu", "--tail", "drop", "-o", tmp_path / "o", "-q")
    assert len(decoded(tmp_path / "o")) == 10


def test_wav_folder_with_classes_from_folders(tmp_path):
    expected = {}
    for label in ("no", "yes"):
        (tmp_path / "wavs" / label).mkdir(parents=True)
        for i in range(3):
            frames = np.arange(100 * (i + 1), dtype=np.int16) * (1 if label == "yes" else -1)
            with wave.open(str(tmp_path / "wavs" / label / f"{i}.wav"), "wb") as file:
                file.setnchannels(1)
                file.setsampwidth(2)
                file.setframerate(8000)
                file.writeframes(frames.tobytes())
            expected[f"{label}/{i}"] = frames
    run("pack", tmp_path / "wavs", "--spec", "pcm16", "--to", "hdf5", "-o", tmp_path / "w",
        "-q")
    samples = decoded(tmp_path / "w")
    assert {s["__key__"] for s in samples} == set(expected)
    for sample in samples:
        values = next(v for k, v in sample.items() if k.endswith(".npy"))
        assert values.numpy().tolist() == expected[sample["__key__"]].tolist()
        assert sample["cls"] == (1 if sample["__key__"].startswith("yes") else 0)
    source = packer.load_manifest(tmp_path / "w")["source"]
    assert source["bytes"] == sum(p.stat().st_size for p in (tmp_path / "wavs").rglob("*.wav"))


def test_idx_images_with_an_idx_labels_file(tmp_path):
    images = np.arange(5 * 28 * 28, dtype=np.uint32).reshape(5, 28, 28) % 251
    labels = [3, 1, 4, 1, 5]
    (tmp_path / "images").write_bytes(struct.pack(">IIII", 0x803, 5, 28, 28) +
                                      images.astype(np.uint8).tobytes())
    (tmp_path / "labels").write_bytes(struct.pack(">II", 0x801, 5) + bytes(labels))
    out = tmp_path / "mnist"
    run("pack", tmp_path / "images", "--spec", "mnist-idx", "--labels", tmp_path / "labels",
        "--label-spec", "mnist-idx-labels", "--to", "hdf5", "-o", out, "-q")
    samples = decoded(out)
    manifest = packer.load_manifest(out)
    assert manifest["classes"] == ["1", "3", "4", "5"]
    assert [manifest["classes"][s["cls"]] for s in samples] == [str(v) for v in labels]
    assert samples[4]["image.npy"].numpy().tolist() == images[4].tolist()


def test_bad_binary_inputs_are_clear_errors(tmp_path):
    (tmp_path / "empty.bin").write_bytes(b"")
    assert "empty" in run("pack", tmp_path / "empty.bin", "--spec", "imu", "-o",
                          tmp_path / "o", expect=1).output
    (tmp_path / "bad.toml").write_text("byte_order = [")
    write_imu(tmp_path / "imu.bin", 3, "little")
    out = run("pack", tmp_path / "imu.bin", "--spec", tmp_path / "bad.toml", "-o", tmp_path / "o",
              expect=1).output
    assert "bad.toml" in out and "Traceback" not in out
    wrong = run("pack", tmp_path / "imu.bin", "--spec", "imu", "--label-field", "speed", "-o",
                tmp_path / "o", expect=2).output
    assert "the spec's record fields are timestamp_ns, accel, gyro, status" in wrong


def test_verify_finds_a_changed_value_in_hdf5_records(tmp_path):
    import h5py

    write_imu(tmp_path / "imu.bin", 30, "little")
    out = tmp_path / "h5"
    run("pack", tmp_path / "imu.bin", "--spec", "imu", "--to", "hdf5", "-o", out, "-q")
    assert "OK" in run("verify", out, "-q").output
    with h5py.File(out, "r+") as file:
        record = file["records"][3]
        record["gyro"][1] += 1.0
        file["records"][3] = record
    assert "differ from the checksum" in run("verify", out, "-q", expect=1).output


def test_hdf5_holds_the_records_readable_with_h5py_alone(tmp_path):
    import h5py

    expected = write_imu(tmp_path / "imu.bin", 12, "little")
    run("pack", tmp_path / "imu.bin", "--spec", "imu", "--to", "hdf5", "-o", tmp_path / "h",
        "--label-field", "status", "-q")
    with h5py.File(tmp_path / "h") as file:
        assert sorted(file) == ["cls", "records"]  # no key dataset: keys are the indexes
        records = file["records"]
        assert records.dtype.names == ("timestamp_ns", "accel", "gyro", "status")
        assert records.dtype.itemsize == 36 and records.chunks is None
        assert records["accel"][5].tolist() == list(expected[5][1:4])
        assert file["cls"][:].tolist() == [r[7] for r in expected]
    manifest = packer.load_manifest(tmp_path / "h")
    assert manifest["key_dataset"] is None and manifest["records"]["records"] == 12
    assert manifest["records"]["members"] == {"timestamp_ns.npy": "timestamp_ns",
                                              "accel.npy": "accel", "gyro.npy": "gyro"}
    assert [s["__key__"] for s in iter_samples(tmp_path / "h")][:2] == ["0000000000",
                                                                      "0000000001"]


def small_parts(monkeypatch, records: int) -> None:
    from packer.packing import writing as packing

    monkeypatch.setattr(packing, "RECORDS_PART_BYTES", records * 36)


@pytest.mark.parametrize("order", ["little", "big"])
def test_hdf5_records_written_in_parts_equal_struct_unpack(order, tmp_path, monkeypatch):
    import h5py

    small_parts(monkeypatch, 7)  # 50 records: 8 parts, the last of 1
    expected = write_imu(tmp_path / "imu.bin", 50, order)
    spec = "imu" if order == "little" else big_endian_spec(tmp_path)
    out = tmp_path / "h"
    run("pack", tmp_path / "imu.bin", "--spec", spec, "--to", "hdf5", "-o", out, "-q")
    manifest = packer.load_manifest(out)
    assert [p["count"] for p in manifest["parts"]] == [7] * 7 + [1]
    with h5py.File(out) as file:
        records = file["records"][:]
    assert records.dtype.isnative and records["status"].dtype.isnative
    assert records["timestamp_ns"].tolist() == [r[0] for r in expected]
    assert records["accel"].tolist() == [list(r[1:4]) for r in expected]
    assert records["status"].tolist() == [r[7] for r in expected]
    assert "OK" in run("verify", out, "-q").output


def test_overlapping_windows_store_each_record_once(tmp_path, monkeypatch):
    import h5py

    small_parts(monkeypatch, 3)  # windows of 8 every 4 records: parts of one window each
    expected = write_imu(tmp_path / "imu.bin", 42, "little")
    out = tmp_path / "w"
    run("pack", tmp_path / "imu.bin", "--spec", "imu", "--to", "hdf5", "-o", out, "--window",
        "8", "--stride", "4", "-q")
    with h5py.File(out) as file:
        assert len(file["records"]) == 42  # all of them, the 2 after the last window too
    manifest = packer.load_manifest(out)
    assert manifest["count"] == 9 and manifest["parts"][-1]["records"] == [32, 42]
    samples = decoded(out)
    assert samples[8]["accel.npy"].tolist() == [list(r[1:4]) for r in expected[32:40]]
    assert "OK" in run("verify", out, "-q").output


def test_records_are_copied_without_copy_file_range_too(tmp_path, monkeypatch):
    import errno
    import os

    def unsupported(*args):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    write_imu(tmp_path / "imu.bin", 20, "little")
    run("pack", tmp_path / "imu.bin", "--spec", "imu", "--to", "hdf5", "-o", tmp_path / "a",
        "-q")
    monkeypatch.setattr(os, "copy_file_range", unsupported)
    run("pack", tmp_path / "imu.bin", "--spec", "imu", "--to", "hdf5", "-o", tmp_path / "b",
        "-q")
    assert decoded_values(tmp_path / "a") == decoded_values(tmp_path / "b")
    assert "OK" in run("verify", tmp_path / "b", "-q").output


def decoded_values(path) -> list:
    return [{k: v.tolist() if hasattr(v, "tolist") else v for k, v in s.items()}
            for s in decoded(path)]


def test_interrupted_records_pack_resumes_to_the_same_dataset(tmp_path, monkeypatch):
    from packer.formats.hdf5 import Hdf5Writer

    small_parts(monkeypatch, 5)
    write_imu(tmp_path / "imu.bin", 33, "little")
    pack = ("pack", tmp_path / "imu.bin", "--spec", "imu", "--to", "hdf5", "--label-field",
            "status", "-q")
    run(*pack, "-o", tmp_path / "whole")
    add_records, calls = Hdf5Writer.add_records, []

    def fail_at_the_fourth(self, source, count):
        calls.append(count)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return add_records(self, source, count)

    monkeypatch.setattr(Hdf5Writer, "add_records", fail_at_the_fourth)
    assert "--resume" in run(*pack, "-o", tmp_path / "cut", expect=130).output
    assert not (tmp_path / "cut").exists() and (tmp_path / "cut.partial").exists()
    resumed_calls = []

    def count_calls(self, source, count):
        resumed_calls.append(count)
        return add_records(self, source, count)

    monkeypatch.setattr(Hdf5Writer, "add_records", count_calls)
    run(*pack, "-o", tmp_path / "cut", "--resume")
    assert resumed_calls == [5, 5, 5, 3]  # 7 parts of 33 records, 3 kept from the first run
    whole, resumed = (packer.load_manifest(tmp_path / name)
                      for name in ("whole", "cut"))
    assert resumed["parts"] == whole["parts"] and resumed["class_counts"] == whole["class_counts"]
    assert resumed["fields"] == whole["fields"]
    assert decoded_values(tmp_path / "cut") == decoded_values(tmp_path / "whole")


def test_overlapping_windows_read_back_as_separate_arrays(tmp_path):
    write_imu(tmp_path / "imu.bin", 20, "little")
    out = tmp_path / "w"
    run("pack", tmp_path / "imu.bin", "--spec", "imu", "--to", "hdf5", "-o", out, "--window",
        "8", "--stride", "4", "-q")
    first, second = list(iter_samples(out))[:2]
    before = second["accel.npy"].copy()
    first["accel.npy"][4:] = 0  # the records these two windows share
    assert np.array_equal(second["accel.npy"], before)


def test_a_spec_edited_before_resume_is_refused(tmp_path, monkeypatch):
    from packer.formats.hdf5 import Hdf5Writer

    small_parts(monkeypatch, 5)
    write_imu(tmp_path / "imu.bin", 20, "little")
    spec = tmp_path / "imu.toml"
    spec.write_text(Path(big_endian_spec(tmp_path)).read_text().replace(
        'byte_order = "big"', 'byte_order = "little"'))
    pack = ("pack", tmp_path / "imu.bin", "--spec", spec, "--to", "hdf5", "-o", tmp_path / "o",
            "-q")
    add_records = Hdf5Writer.add_records

    def interrupted(self, source, count):
        if self.count:
            raise KeyboardInterrupt
        return add_records(self, source, count)

    monkeypatch.setattr(Hdf5Writer, "add_records", interrupted)
    run(*pack, expect=130)
    monkeypatch.setattr(Hdf5Writer, "add_records", add_records)
    spec.write_text(spec.read_text().replace('type = "f4"', 'type = "i4"'))
    refused = run(*pack, "--resume", expect=2).output
    assert "the input changed since the interrupted run" in refused
    assert not (tmp_path / "o").exists()


def test_a_label_field_must_be_one_number_and_a_dump_must_hold_records(tmp_path):
    write_imu(tmp_path / "imu.bin", 5, "little")
    shaped = run("pack", tmp_path / "imu.bin", "--spec", "imu", "--label-field", "accel", "-o",
                 tmp_path / "o", expect=2).output
    assert "record.fields.accel is f4[3]" in shaped and "timestamp_ns, status" in shaped
    write_imu(tmp_path / "empty.bin", 0, "little")
    empty = run("pack", tmp_path / "empty.bin", "--spec", "imu", "--label-field", "status",
                "-o", tmp_path / "o", expect=1).output
    assert "holds no records (64 bytes = 64 header + 0 records of 36" in empty


def test_an_int64_record_field_reads_back_as_an_array_from_shards(tmp_path):
    spec = tmp_path / "ticks.toml"
    spec.write_text('byte_order = "little"\ncount = {from = "file_size"}\n[record]\nsize = 8\n'
                    '[record.fields]\nticks = {type = "i8", offset = 0}\n')
    (tmp_path / "ticks.bin").write_bytes(struct.pack("<3q", -5, 0, 7))
    run("pack", tmp_path / "ticks.bin", "--spec", spec, "-o", tmp_path / "wds", "-q")
    assert [int(s["ticks.npy"]) for s in decoded(tmp_path / "wds")] == [-5, 0, 7]


def test_a_manifest_of_a_newer_layout_is_refused(tmp_path):
    write_imu(tmp_path / "imu.bin", 3, "little")
    out = tmp_path / "h"
    run("pack", tmp_path / "imu.bin", "--spec", "imu", "--to", "hdf5", "-o", out, "-q")
    manifest = packer.load_manifest(out)
    import h5py

    with h5py.File(out, "r+") as file:  # the manifest is in the file's attributes
        file.attrs["packer_manifest"] = json.dumps({**manifest, "layout_version": 99})
    assert "cannot read; upgrade packer" in run("inspect", out, expect=1).output
