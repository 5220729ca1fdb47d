"""NaN and infinite values: in the data (statistics, `train check`, `train fit`), in the
training loss (a diverging run stops), and never in the JSON files a run writes."""

import json
import math
import struct

import numpy as np
import pytest
from dumps import IMU_RECORD

from conftest import run as packer_run
from train.config import TrainConfig
from train.data import describe
from train.metrics import strict_json
from train_cli import train

SMALL = ["--batch-size", "8", "--workers", "0", "--device", "cpu"]


def imu_windows(root, bad: dict | None = None):
    """96 IMU records packed as 12 windows of 8; bad: record -> value for its accel x."""
    rng = np.random.default_rng(3)
    rows = [(i * 5_000_000, *rng.standard_normal(6).astype(np.float32).tolist(), i % 3)
            for i in range(96)]
    for record, value in (bad or {}).items():
        rows[record] = (rows[record][0], value, *rows[record][2:])
    body = b"".join(struct.pack("<" + IMU_RECORD, *row) for row in rows)
    (root / "imu.bin").write_bytes((b"IMU1" + struct.pack("<II", 96, 200)).ljust(64, b"\0")
                                   + body)
    packer_run("pack", root / "imu.bin", "--spec", "imu", "--to", "hdf5", "-o", root / "win",
               "--window", "8", "--label-field", "status", "-q")
    return root / "win"


@pytest.fixture(scope="module")
def poisoned(tmp_path_factory):
    """One NaN (record 20: window 2) and one infinity (record 90: window 11)."""
    return imu_windows(tmp_path_factory.mktemp("nan"), {20: math.nan, 90: math.inf})


def test_statistics_leave_non_finite_values_out(poisoned):
    stats = describe(TrainConfig(data=str(poisoned), val_split=0.0)).stats
    assert all(math.isfinite(v) for v in stats["mean"] + stats["std"])
    assert stats["std"][0] != 1.0  # accel x: the finite values' spread, not the fallback


def test_check_names_the_non_finite_samples_and_exits_1(poisoned, tmp_path):
    output = train("check", poisoned, "--out", tmp_path, *SMALL, expect=1)
    assert "input_shape: [6, 8]" in output  # the report comes first
    assert ("NaN or infinite values in 2 of 12 samples (2 values in accel.npy; sample keys "
            "0000000002, 0000000011)") in output
    assert "or leave the field out with --inputs" in output and "Traceback" not in output


def test_fit_refuses_non_finite_data(poisoned, tmp_path):
    output = train("fit", poisoned, "--out", tmp_path / "run", "--epochs", "1", *SMALL,
                   expect=1)
    assert "Error: " in output and "NaN or infinite values in 2 of 12 samples" in output
    assert not (tmp_path / "run").exists()


def test_clean_data_passes_check(tmp_path):
    data = imu_windows(tmp_path)
    output = train("check", data, "--out", tmp_path / "check", *SMALL)
    assert "non_finite_inputs: 0" in output and "Error" not in output


def diverge(data, out, *options):
    return train("fit", data, "--out", out, "--epochs", "3", "--lr", "1e30", "--schedule",
                 "constant", "--warmup-epochs", "0", "--workers", "0", "--device", "cpu",
                 *options, expect=1)


def test_a_diverging_training_loss_stops_fit(tmp_path):
    output = diverge(imu_windows(tmp_path), tmp_path / "run", "--batch-size", "8",
                     "--val-split", "0")
    assert "Error: epoch 1, step 2: the training loss became NaN or infinite, so training " \
           "stopped (no checkpoint was written)" in output
    assert "try a lower --lr (this run: 1e+30) or --clip-grad" in output
    assert "Traceback" not in output and not (tmp_path / "run" / "best.pt").exists()


def test_diverged_weights_are_never_saved(tmp_path):
    """One step per epoch: the first step's loss is finite, its update is not."""
    output = diverge(imu_windows(tmp_path), tmp_path / "run", "--batch-size", "64",
                     "--val-split", "0.2")
    assert "Error: epoch 1: the validation loss became NaN or infinite" in output
    assert not (tmp_path / "run" / "best.pt").exists()
    assert not (tmp_path / "run" / "last.pt").exists()


def test_json_records_hold_null_for_non_finite_values():
    record = {"loss": math.nan, "val": {"rmse": math.inf, "per_class": [1.0, -math.inf]}}
    text = json.dumps(strict_json(record), allow_nan=False)
    assert json.loads(text) == {"loss": None, "val": {"rmse": None, "per_class": [1.0, None]}}
