"""--monitor: the metric of the best epoch and early stopping, chosen from the data."""

import json

import pytest

from conftest import colour_images
from conftest import run as packer_run
from train.config import TrainConfig
from train.data import DataInfo
from train.monitor import choose, progressed, score
from train_cli import train

COMMON = ["--image-size", "16", "--batch-size", "16", "--workers", "0", "--lr", "3e-3"]


def info(task="classify", counts=(50, 50, 50)) -> DataInfo:
    return DataInfo("image", ["jpg"], "cls", task, ["a", "b", "c"], counts and list(counts),
                    (3, 8, 8), None)


@pytest.mark.parametrize("task, counts, chosen", [
    ("classify", (50, 50, 50), "accuracy"), ("classify", (100, 90, 10), "macro-f1"),
    ("regress", None, "mae"), ("multilabel", (5, 40, 40), "map")])
def test_the_metric_comes_from_the_data(task, counts, chosen):
    config = TrainConfig(data="d")
    [choice] = choose(config, info(task, counts), 150)
    assert config.monitor == chosen and choice.value == chosen


@pytest.mark.parametrize("task, counts, val_samples, chosen", [
    ("classify", (50, 50, 50), 30, "loss"), ("classify", (100, 90, 10), 99, "loss"),
    ("classify", (50, 50, 50), 100, "accuracy"), ("regress", None, 30, "mae"),
    ("multilabel", (5, 40, 40), 30, "map")])
def test_a_small_validation_set_monitors_the_loss(task, counts, val_samples, chosen):
    config = TrainConfig(data="d")
    [choice] = choose(config, info(task, counts), val_samples)
    assert config.monitor == chosen
    if chosen == "loss":
        assert f"a validation set of {val_samples} samples" in choice.why
        assert f"steps of {1 / val_samples:.0%}" in choice.why


def test_macro_f1_and_balanced_accuracy_leave_out_classes_without_samples():
    val = {"loss": 0.5, "accuracy": 0.9, "per_class": {
        "a": {"precision": 1.0, "recall": 1.0, "f1": 1.0, "samples": 9},
        "b": {"precision": 0.5, "recall": 0.0, "f1": 0.0, "samples": 1},
        "c": {"precision": 0.0, "recall": None, "f1": None, "samples": 0}}}
    assert score("macro-f1", val, {}) == ("val macro-F1", 0.5)
    assert score("balanced-accuracy", val, {}) == ("val balanced accuracy", 0.5)
    assert score("accuracy", val, {}) == ("val accuracy", 0.9)
    assert score("macro-f1", None, {"loss": 0.25}) == ("train loss", -0.25)


def test_a_tie_with_a_lower_loss_is_no_progress():
    assert progressed([0.9, -0.3], [0.8, -0.2]) and progressed([0.9, -0.3], None)
    assert not progressed([1.0, -0.01], [1.0, -0.02])  # best.pt moves; patience runs on


def test_monitors_that_do_not_fit_the_task_are_refused(tmp_path):
    colour_images(tmp_path / "images", [(200, 30, 30), (30, 200, 30)], 8, 20)
    packer_run("pack", tmp_path / "images", "-o", tmp_path / "wds", "-q")
    said = train("fit", tmp_path / "wds", "--out", tmp_path / "run", "--monitor", "mae",
                 *COMMON, expect=1)
    assert "--monitor mae scores regression, and this is a classify task" in said


@pytest.fixture(scope="module")
def easy(tmp_path_factory):
    root = tmp_path_factory.mktemp("monitor")
    colour_images(root / "images", [(220, 30, 30), (30, 220, 30), (30, 30, 220)], 30, 10)
    packer_run("pack", root / "images", "-o", root / "wds", "-q")
    return root


def test_early_stopping_ends_a_run_whose_accuracy_stays_perfect(easy, tmp_path):
    """Accuracy 1.0 early with the loss still falling kept 'improving' on the loss
    tie-break, so a run never stopped early."""
    output = train("fit", easy / "wds", "--out", tmp_path / "run", "--epochs", "14",
                   "--patience", "2", "--val-split", "0.3", "--monitor", "accuracy", *COMMON)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    accuracy = [json.loads(line)["val"]["accuracy"]
                for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    last_better = max(i for i, a in enumerate(accuracy) if a > max(accuracy[:i], default=-1))
    assert summary["stopped_early"] and len(accuracy) == last_better + 1 + 2, output
    assert summary["monitor"] == "val accuracy"


def test_macro_f1_is_printed_every_epoch_and_names_the_best(easy, tmp_path):
    output = train("fit", easy / "wds", "--out", tmp_path / "run", "--epochs", "2",
                   "--monitor", "macro-f1", *COMMON)
    epochs = [line for line in output.splitlines() if line.startswith("epoch ")]
    assert len(epochs) == 2 and all("val macro-F1 " in line for line in epochs)
    assert "best epoch" in output and ": val macro-F1 " in output.splitlines()[-1]
    records = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert json.loads(records[-1])["monitor"]["name"] == "val macro-F1"
