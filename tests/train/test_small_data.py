"""Small data: a held-out share large enough to judge by, a time limit, and k-fold
cross-validation (`--folds K`) with the mean and spread of the folds' scores."""

import json

import numpy as np
import pytest

from conftest import colour_images
from conftest import run as packer_run
from train.config import TrainConfig
from train.sides import MAX_HELD_SHARE, fold_held, held_share
from train_cli import train

QUICK = ["--epochs", "2", "--lr", "3e-3", "--workers", "0", "--image-size", "16"]


@pytest.fixture(scope="module")
def fifty(tmp_path_factory):
    """51 images of three colours, packed: a dataset too small for a tenth to judge by."""
    root = tmp_path_factory.mktemp("small")
    colour_images(root / "images", [(220, 40, 40), (40, 200, 40), (40, 40, 220)], 17, 40)
    packer_run("pack", root / "images", "-o", root / "wds", "-q")
    return root / "wds"


def test_a_small_dataset_holds_out_more_than_a_tenth_and_says_so(fifty, tmp_path):
    output = train("fit", fifty, "--out", tmp_path / "run", *QUICK)
    assert "val split 0.2: a small dataset (51 samples)" in output
    assert "--folds 5" in output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["chosen"]["val_split"]["value"] == MAX_HELD_SHARE
    assert sum(summary["best"]["val"]["confusion"][0]) + sum(
        summary["best"]["val"]["confusion"][1]) + sum(
        summary["best"]["val"]["confusion"][2]) == 9  # 3 of each class's 17


def test_the_share_is_a_tenth_for_larger_data_and_never_above_the_cap():
    auto = TrainConfig()
    assert held_share(auto, 5_000) == (0.1, "a tenth of the 5,000 samples held out for "
                                            "validation")
    assert held_share(auto, 300)[0] == 0.17
    assert held_share(auto, 20)[0] == MAX_HELD_SHARE
    assert held_share(TrainConfig(val_split=0.05), 20) == (0.05, None)  # given: kept


def test_small_data_gets_a_time_limit_that_ends_the_run(fifty, tmp_path):
    output = train("fit", fifty, "--out", tmp_path / "run", *QUICK[2:], "--epochs", "50",
                   "--time-limit", "0.0001")
    assert "stopped at the time limit" in output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["stopped_by"] == "time limit" and summary["epochs_run"] == 1
    auto = train("fit", fifty, "--out", tmp_path / "auto", *QUICK)
    assert "time limit 10: minutes at most, for small data" in auto


def test_folds_are_stratified_disjoint_and_cover_every_labelled_sample():
    labels = [0] * 18 + [1] * 18 + [2] * 7 + [-1] * 3
    held = np.array([fold_held(labels, 5, fold, seed=4) for fold in range(5)])
    assert (held[:, :43].sum(axis=0) == 1).all()  # each labelled sample in one fold
    assert not held[:, 43:].any()  # unlabelled ones always train
    sizes = held.sum(axis=1)
    assert sizes.max() - sizes.min() <= 1
    for label in range(3):
        shares = held[:, np.array(labels) == label].sum(axis=1)
        assert shares.max() - shares.min() <= 1, label
    assert not (fold_held(labels, 5, 0, seed=5) == held[0]).all()  # drawn from the seed


def test_folds_run_each_fold_and_report_the_mean_and_spread(fifty, tmp_path):
    out = tmp_path / "cv"
    output = train("fit", fifty, "--out", out, *QUICK, "--folds", "3", "--json")
    result = json.loads(output.strip().splitlines()[-1])
    assert result["folds"] == 3 and len(result["scores"]) == 3
    assert result["mean"] == pytest.approx(np.mean(result["scores"]))
    assert result["std"] == pytest.approx(np.std(result["scores"], ddof=1))
    assert "3-fold cross-validation" in output and "spread (standard deviation)" in output
    for fold in (1, 2, 3):
        val = json.loads((out / f"fold-{fold}" / "summary.json").read_text())["best"]["val"]
        assert np.sum(val["confusion"]) == 17  # a third of 51
    assert json.loads((out / "folds.json").read_text())["scores"] == result["scores"]
    again = train("fit", fifty, "--out", out, *QUICK, "--folds", "3", "--resume")
    assert "fold 1 of 3" not in again  # finished folds are kept, not run again
    assert json.loads((out / "folds.json").read_text())["scores"] == result["scores"]


@pytest.mark.parametrize("other", [["--val-split", "0.2"], ["--val-split-name", "val"]])
def test_folds_are_refused_beside_another_choice_of_validation(fifty, tmp_path, other):
    output = train("fit", fifty, "--out", tmp_path / "cv", *QUICK, "--folds", "3", *other,
                   expect=1)
    assert "--folds 3 validates on each fold of DATA in turn" in output
    assert not (tmp_path / "cv").exists()
