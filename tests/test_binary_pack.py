"""Packing binary dumps: values equal to an independent struct decoding, every format."""

import json
import struct
import wave

import numpy as np
import pytest

from conftest import run
from packer.dataset import iter_samples
from packer.decode import Decoder
from packer.formats import FORMAT_NAMES

IMU_RECORD = "Q3f3fH2x"  # u8 timestamp, f4 accel[3], f4 gyro[3], u2 status, 2 padding bytes


def write_imu(path, records: int, order: str, trailing: bytes = b"") -> list[tuple]:
    """An IMU dump written record by record with struct; returns the decoded values."""
    prefix = "<" if order == "little" else ">"
    rng = np.random.default_rng(7)
    rows = [(i * 5_000_000, *rng.standard_normal(6).astype(np.float32).tolist(), i % 3)
            for i in range(records)]
    header = b"IMU1" + struct.pack(prefix + "II", records, 200)
    body = b"".join(struct.pack(prefix + IMU_RECORD, *row) for row in rows)
    path.write_bytes(header.ljust(64, b"\0") + body + trailing)
    return [struct.unpack(prefix + IMU_RECORD, struct.pack(prefix + IMU_RECORD, *r)) for r in rows]


def big_endian_spec(tmp_path):
    from importlib import resources

    text = (resources.files("packer.binary") / "specs" / "imu.toml").read_text()
    path = tmp_path / "imu-be.toml"
    path.write_text(text.replace('byte_order = "little"', 'byte_order = "big"'))
    return str(path)


def decoded(path):
    decoder = Decoder("raw")
    return [decoder(s) for s in iter_samples(path)]


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
    manifest = json.loads((out / "manifest.json").read_text())
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
    source = json.loads((tmp_path / "w" / "manifest.json").read_text())["source"]
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
    manifest = json.loads((out / "manifest.json").read_text())
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


def test_verify_finds_a_changed_value_in_hdf5_columns(tmp_path):
    import h5py

    write_imu(tmp_path / "imu.bin", 30, "little")
    out = tmp_path / "h5"
    run("pack", tmp_path / "imu.bin", "--spec", "imu", "--to", "hdf5", "-o", out, "-q")
    assert "OK" in run("verify", out, "-q").output
    with h5py.File(out / "data.h5", "r+") as file:
        file["gyro.npy"][3, 1] += 1.0
    assert "differ from the checksum" in run("verify", out, "-q", expect=1).output


def test_hdf5_from_blocks_keys_samples_by_index(tmp_path):
    import h5py

    write_imu(tmp_path / "imu.bin", 12, "little")
    run("pack", tmp_path / "imu.bin", "--spec", "imu", "--to", "hdf5", "-o", tmp_path / "h", "-q")
    with h5py.File(tmp_path / "h" / "data.h5") as file:
        assert "__key__" not in file and len(file["accel.npy"]) == 12  # keys: the indexes
    assert json.loads((tmp_path / "h" / "manifest.json").read_text())["key_dataset"] is None
    assert [s["__key__"] for s in iter_samples(tmp_path / "h")][:2] == ["0000000000",
                                                                      "0000000001"]


@pytest.mark.parametrize("order", ["little", "big"])
def test_hdf5_blocks_reuse_their_arrays_without_mixing_blocks(order, tmp_path, monkeypatch):
    import h5py

    from packer.sources import binary

    monkeypatch.setattr(binary, "BLOCK_BYTES", 7 * 36)  # 50 records: 8 blocks, the last of 1
    expected = write_imu(tmp_path / "imu.bin", 50, order)
    spec = "imu" if order == "little" else big_endian_spec(tmp_path)
    out = tmp_path / "h"
    run("pack", tmp_path / "imu.bin", "--spec", spec, "--to", "hdf5", "-o", out, "-q")
    manifest = json.loads((out / "manifest.json").read_text())
    assert [p["count"] for p in manifest["parts"]] == [7] * 7 + [1]
    with h5py.File(out / "data.h5") as file:
        assert file["timestamp_ns.npy"][:].tolist() == [r[0] for r in expected]
        assert file["accel.npy"][:].tolist() == [list(r[1:4]) for r in expected]
        assert file["status.npy"].dtype.isnative and file["status.npy"][:].tolist() == [
            r[7] for r in expected]
    assert "OK" in run("verify", out, "-q").output
