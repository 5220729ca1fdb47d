"""What `train` makes of the data: classes of --val, input fields, normalisation,
mixed image fields, variable-length arrays; and its option checks."""

import struct
import wave

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from dumps import write_imu

from conftest import image_bytes
from conftest import run as packer_run
from train.cli import cli
from train.config import TrainConfig
from train.data import describe
from train.datasets import datasets
from train.inputs import to_inputs
from train_cli import train

SMALL = ["--image-size", "16", "--batch-size", "8", "--workers", "0"]


def pack_folder(root, classes, count=4):
    """An ImageFolder of `count` JPEGs per class, packed; returns the packed path."""
    for label in classes:
        (root / "src" / label).mkdir(parents=True)
        for i in range(count):
            (root / "src" / label / f"{i}.jpg").write_bytes(image_bytes(i, size=(16, 16)))
    packer_run("pack", root / "src", "-o", root / "wds", "-q")
    return root / "wds"


def test_val_classes_are_mapped_to_training_ids_by_name(tmp_path):
    data = pack_folder(tmp_path / "train", ["bird", "cat", "dog"])
    val = pack_folder(tmp_path / "val", ["cat", "dog"])
    config = TrainConfig(data=str(data), val=str(val), image_size=16)
    info = describe(config)
    _, val_set = datasets(info, config)
    labels = {s["__key__"].split("/")[0]: s["cls"] for s in val_set}
    assert labels == {"cat": 1, "dog": 2}
    train("fit", data, "--val", val, "--epochs", "1", "--out", tmp_path / "run", *SMALL)


def test_val_classes_unknown_to_training_are_an_error(tmp_path):
    data = pack_folder(tmp_path / "train", ["bird", "cat"])
    val = pack_folder(tmp_path / "val", ["bird", "catx"])
    output = train("fit", data, "--val", val, "--out", tmp_path / "run", *SMALL, expect=1)
    assert "classes unknown to the training data: catx" in output
    assert "(training classes: bird, cat)" in output and not (tmp_path / "run").exists()


def test_a_val_split_that_holds_out_nothing_is_an_error(tmp_path):
    """Stratified, a split holds one sample of each class of two or more: of classes
    of one sample each it holds none."""
    data = pack_folder(tmp_path, ["a", "b"], count=1)
    output = train("fit", data, "--val-split", "0.1", "--out", tmp_path / "run", *SMALL,
                   expect=1)
    assert "--val-split 0.1 holds out no sample of the 2" in output


@pytest.fixture(scope="module")
def windows(tmp_path_factory):
    root = tmp_path_factory.mktemp("imu")
    write_imu(root / "imu.bin", 96, "little")
    packer_run("pack", root / "imu.bin", "--spec", "imu", "--to", "hdf5", "-o", root / "win",
               "--window", "8", "--label-field", "status", "-q")
    return root / "win"


def test_windows_leave_time_stamps_out_and_are_normalised(windows):
    config = TrainConfig(data=str(windows), val_split=0.0)
    info = describe(config)
    assert info.inputs == ["accel.npy", "gyro.npy"] and info.input_shape == (6, 8)
    train_set, _ = datasets(info, config)
    batch = next(iter(torch.utils.data.DataLoader(train_set, batch_size=12)))
    inputs = to_inputs(batch, info, torch.device("cpu"))
    raw = torch.cat([batch["accel.npy"], batch["gyro.npy"]], dim=2).transpose(1, 2)
    mean = raw.double().mean(dim=(0, 2), keepdim=True)
    std = raw.double().std(dim=(0, 2), correction=0, keepdim=True)
    assert torch.allclose(inputs.double(), (raw - mean) / std, atol=1e-5)


def test_inputs_choose_the_fields(windows, tmp_path):
    config = TrainConfig(data=str(windows), val_split=0.0, inputs="timestamp_ns,accel")
    info = describe(config)
    assert info.inputs == ["timestamp_ns.npy", "accel.npy"] and info.input_shape == (4, 8)
    assert abs(info.stats["mean"][0] - 47.5 * 5e6) < 1e3  # the mean time stamp, 0 to 95 x 5 ms
    report = train("check", windows, "--out", tmp_path, "--workers", "0")
    assert "inputs: accel.npy, gyro.npy" in report and "input_shape: [6, 8]" in report
    output = train("check", windows, "--inputs", "accel,speed", "--out", tmp_path, expect=1)
    assert "has no array field speed (array fields: timestamp_ns, accel, gyro)" in output


def test_two_dimensional_uint8_arrays_are_grey_images(tmp_path):
    images = np.random.default_rng(0).integers(0, 256, (12, 28, 28), dtype=np.uint8)
    (tmp_path / "images").write_bytes(struct.pack(">IIII", 0x803, 12, 28, 28) + images.tobytes())
    (tmp_path / "labels").write_bytes(struct.pack(">II", 0x801, 12) + bytes([0, 1] * 6))
    packer_run("pack", tmp_path / "images", "--spec", "mnist-idx", "--labels",
               tmp_path / "labels", "--label-spec", "mnist-idx-labels", "--to", "hdf5", "-o",
               tmp_path / "mnist", "-q")
    config = TrainConfig(data=str(tmp_path / "mnist"), val_split=0.0)
    info = describe(config)
    assert (info.kind, info.input_shape) == ("image", (1, 28, 28))
    scaled = torch.from_numpy(images).double() / 255
    assert info.stats["mean"][0] == pytest.approx(scaled.mean().item())
    batch = {"image.npy": torch.from_numpy(images[:2])}
    expected = (scaled[:2] - scaled.mean()) / scaled.std(correction=0)
    assert torch.allclose(to_inputs(batch, info, torch.device("cpu")).double(),
                          expected.unsqueeze(1), atol=1e-5)
    report = train("check", tmp_path / "mnist", "--out", tmp_path / "check", "--workers", "0")
    assert "input_shape: [1, 28, 28]" in report and "grey" in report
    train("fit", tmp_path / "mnist", "--epochs", "1", "--val-split", "0.5", "--out",
          tmp_path / "run", *SMALL)


def test_mixed_image_fields_come_under_one_key(tmp_path):
    for folder, fmt in (("a", "JPEG"), ("b", "PNG")):
        (tmp_path / "src" / folder).mkdir(parents=True)
        for i in range(4):
            name = f"{i}.{'jpg' if fmt == 'JPEG' else 'png'}"
            (tmp_path / "src" / folder / name).write_bytes(image_bytes(i, fmt, (16, 16)))
    (tmp_path / "src" / "b" / "x.jpg").write_bytes(image_bytes(9, size=(16, 16)))
    packer_run("pack", tmp_path / "src", "-o", tmp_path / "wds", "-q")
    info = describe(TrainConfig(data=str(tmp_path / "wds")))
    assert info.inputs == ["image"]
    report = train("check", tmp_path / "wds", "--out", tmp_path / "check", *SMALL)
    assert "input_shape: [3, 16, 16]" in report


def test_variable_length_arrays_say_so(tmp_path):
    for label in ("no", "yes"):
        (tmp_path / "wavs" / label).mkdir(parents=True)
        for i in range(2):
            with wave.open(str(tmp_path / "wavs" / label / f"{i}.wav"), "wb") as file:
                file.setnchannels(1)
                file.setsampwidth(2)
                file.setframerate(8000)
                file.writeframes(np.zeros(100 * (i + 1), np.int16).tobytes())
    packer_run("pack", tmp_path / "wavs", "--spec", "pcm16", "-o", tmp_path / "w", "-q")
    output = train("check", tmp_path / "w", "--out", tmp_path / "check", expect=1)
    assert "the arrays in sample.npy differ in length from sample to sample" in output


@pytest.mark.parametrize("option", [("--epochs", "0"), ("--batch-size", "0"),
                                    ("--val-split", "1.0"), ("--val-split", "1.5"),
                                    ("--workers", "-1"), ("--lr", "0"), ("--patience", "0"),
                                    ("--dropout", "1"), ("--seed", "-1")])
def test_option_ranges_are_checked(tmp_path, option):
    output = train("fit", tmp_path, *option, expect=2)
    assert f"Invalid value for '{option[0]}'" in output and "Traceback" not in output


def test_each_command_lists_only_its_options():
    check = train("check", "--help")
    overfit = train("overfit", "--help")
    for fit_only in ("--epochs", "--patience", "--resume", "--val-split", "--schedule"):
        assert fit_only not in check and fit_only not in overfit
    assert "--out" not in overfit and "--lr" in overfit and "--lr" not in check
    assert "--inputs" in check and "e.g. --inputs accel,gyro" in train("fit", "--help")


def test_a_jpg_folder_with_one_jpg_in_capitals_trains(tmp_path):
    """The loader gives mixed extensions under `image`: the trainer's sizes took the
    first field named like an image, found none, and ended in StopIteration."""
    from conftest import class_images

    images = class_images(tmp_path / "images", 2, 12)
    first = next((images / "c0").glob("*.jpg"))
    first.rename(first.with_suffix(".JPG"))
    packer_run("pack", images, "-o", tmp_path / "wds", "-q")
    for args in (["check", tmp_path / "wds", "--out", tmp_path / "check"],
                 ["fit", tmp_path / "wds", "--out", tmp_path / "run", "--epochs", "1",
                  "--workers", "0"]):
        result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
        assert result.exit_code == 0, result.output


def imbalanced_table(tmp_path, rare_rows=(0, 1, 2, 3, 4, 5, 6, 7, 8, 10)):
    """110 rows packed in order: 100 of class "common", 10 of "rare" at `rare_rows`
    (none where an evenly spread tenth would fall: rows 9, 19, ...)."""
    rng = np.random.default_rng(3)
    rows = ["a,b,y"] + [f"{rng.normal():.5f},{rng.normal():.5f},"
                        f"{'rare' if i in rare_rows else 'common'}" for i in range(110)]
    (tmp_path / "imb.csv").write_text("\n".join(rows) + "\n")
    packer_run("pack", tmp_path / "imb.csv", "--to", "hdf5", "--label-column", "y", "--task",
               "classify", "-o", tmp_path / "imb.h5", "-q")
    return tmp_path / "imb.h5"


def held_labels(data, seed=0):
    config = TrainConfig(data=str(data), seed=seed, val_split=0.1)
    info = describe(config)
    train_set, val_set = datasets(info, config)
    val = {s["__key__"]: info.classes[int(s["cls"])] for s in val_set}
    train = {s["__key__"]: info.classes[int(s["cls"])] for s in train_set}
    return val, train


def test_the_validation_split_holds_each_class_in_its_share(tmp_path):
    data = imbalanced_table(tmp_path)
    val, train = held_labels(data)
    assert sorted(val.values()).count("rare") == 1 and len(val) == 11  # 10% of each class
    assert not set(val) & set(train) and len(val) + len(train) == 110
    assert held_labels(data)[0] == val  # the same seed holds out the same samples
    assert held_labels(data, seed=1)[0] != val


def test_fit_warns_of_imbalanced_classes_once_as_check_does(tmp_path):
    data = imbalanced_table(tmp_path)
    args = ["--epochs", "2", "--workers", "0", "--lr", "3e-3", "--batch-size", "16"]
    said = train("fit", data, "--out", tmp_path / "run", *args)
    assert said.count("WARNING: classes are imbalanced (100 against 10 samples): consider "
                      "--class-weights auto") == 1
    assert "WARNING: classes are imbalanced (100 against 10" in train("check", data, "--out",
                                                                      tmp_path / "check")
    weighed = train("fit", data, "--out", tmp_path / "weighed", "--class-weights", "auto", *args)
    assert "WARNING" not in weighed
