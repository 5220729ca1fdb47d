"""`packer inspect` and `packer verify --against SOURCE` for every kind of dataset:
tables, binary dumps and folders of binary files, in every format."""

import json

import numpy as np
import pandas as pd
import pytest
from audio_files import pcm_frames, wav_bytes
from dumps import write_imu

from conftest import run
from packer.formats import FORMAT_NAMES


def write_table(path, change_row: int | None = None):
    frame = pd.DataFrame({"x": np.arange(60) * 0.5, "z": np.arange(60) % 7,
                          "diagnosis": ["benign", "malignant", "benign"] * 20})
    if change_row is not None:
        frame.loc[change_row, "x"] += 0.25
    frame.to_csv(path, index=False)


def write_wavs(folder, changed: bool = False):
    for label in ("no", "yes"):
        (folder / label).mkdir(parents=True, exist_ok=True)
        for i in range(3):
            values = pcm_frames(30 + i, 2, 24, seed=i + (label == "yes") * 10)
            if changed and label == "yes" and i == 1:
                values[3, 1] ^= 1
            (folder / label / f"{i}.wav").write_bytes(wav_bytes(values, 24))


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_a_table_verifies_against_its_file_and_a_changed_cell_is_named(fmt, tmp_path):
    write_table(tmp_path / "t.csv")
    out = tmp_path / "o"
    run("pack", tmp_path / "t.csv", "--label-column", "diagnosis", "--to", fmt, "-o", out, "-q")
    assert "OK: 60 samples" in run("verify", out, "--against", tmp_path / "t.csv", "-q").output
    write_table(tmp_path / "t.csv", change_row=17)
    failed = run("verify", out, "--against", tmp_path / "t.csv", "-q", expect=1).output
    assert "sample '0000000017' (row 17 of those packed): field npy differs from" in failed
    assert failed.count("differs") == 1
    text = run("inspect", out).output
    assert "60 samples" in text and "0  benign: 40" in text
    assert json.loads(run("inspect", out, "--json").output)["source"]["kind"] == "table"


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_a_dump_verifies_against_its_file_and_a_changed_record_is_named(fmt, tmp_path):
    dump = tmp_path / "imu.bin"
    write_imu(dump, 300, "little")
    out = tmp_path / "o"
    run("pack", dump, "--spec", "imu", "--label-field", "status", "--to", fmt, "-o", out, "-q")
    assert "OK: 300 samples" in run("verify", out, "--against", dump, "-q").output
    data = bytearray(dump.read_bytes())
    data[64 + 36 * 123 + 9] ^= 0x40  # in record 123's accel
    data[4:8] = (301).to_bytes(4, "little")
    dump.write_bytes(bytes(data) + bytes(36))  # and one record more than was packed
    failed = run("verify", out, "--against", dump, "-q", expect=1).output
    assert "sample '0000000123' (record 123 of those packed): field accel.npy differs" in failed
    assert "gives 301 samples, 300 were packed" in failed
    assert "300 samples" in run("inspect", out).output


def test_windows_of_a_dump_verify_against_it(tmp_path):
    write_imu(tmp_path / "imu.bin", 200, "little")
    run("pack", tmp_path / "imu.bin", "--spec", "imu", "--window", "32", "--stride", "16",
        "--to", "hdf5", "-o", tmp_path / "o", "-q")
    assert "OK: 11 samples" in run("verify", tmp_path / "o", "--against",
                                   tmp_path / "imu.bin", "-q").output


@pytest.mark.parametrize("fmt", ["webdataset", "hdf5"])
def test_a_folder_of_wavs_verifies_against_it_and_a_changed_file_is_named(fmt, tmp_path):
    write_wavs(tmp_path / "wavs")
    out = tmp_path / "o"
    run("pack", tmp_path / "wavs", "--spec", "wav", "--to", fmt, "-o", out, "-q")
    assert "OK: 6 samples" in run("verify", out, "--against", tmp_path / "wavs", "-q").output
    write_wavs(tmp_path / "wavs", changed=True)
    (tmp_path / "wavs" / "no" / "9.wav").write_bytes(wav_bytes(pcm_frames(5, 1, 16), 16))
    failed = run("verify", out, "--against", tmp_path / "wavs", "-q", expect=1).output
    assert "yes/1.wav: field sample.npy differs from the source file" in failed
    assert "no/9.wav: in the source but neither packed nor listed as skipped" in failed
    text = run("inspect", out).output
    assert "6 samples" in text and "sample.npy" in text and "0  no: 3" in text


def test_against_takes_the_kind_of_path_the_dataset_came_from(tmp_path):
    write_table(tmp_path / "t.csv")
    write_imu(tmp_path / "imu.bin", 10, "little")
    write_wavs(tmp_path / "wavs")
    run("pack", tmp_path / "t.csv", "-o", tmp_path / "t", "-q")
    run("pack", tmp_path / "imu.bin", "--spec", "imu", "-o", tmp_path / "d", "-q")
    run("pack", tmp_path / "wavs", "--spec", "wav", "-o", tmp_path / "w", "-q")
    assert "not a file; this dataset was packed from a table" in run(
        "verify", tmp_path / "t", "--against", tmp_path / "wavs", expect=2).output
    assert "not a file; this dataset was packed from a binary dump" in run(
        "verify", tmp_path / "d", "--against", tmp_path / "wavs", expect=2).output
    assert "not a folder; this dataset was packed from a folder of binary files" in run(
        "verify", tmp_path / "w", "--against", tmp_path / "imu.bin", expect=2).output
    assert "no such file or folder" in run(
        "verify", tmp_path / "w", "--against", tmp_path / "nothing", expect=2).output
