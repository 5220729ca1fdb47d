"""A dataset split when packed trains on its split train, validates on its validation
split and never reads the others; `train evaluate --split` scores one split."""

import json

import pytest

from conftest import colour_images
from conftest import run as packer_run
from train_cli import train

COMMON = ["--image-size", "16", "--batch-size", "8", "--workers", "0", "--epochs", "2",
          "--lr", "3e-3"]
COLOURS = [(200, 30, 30), (30, 200, 30), (30, 30, 200)]


def epoch_counts(run) -> tuple[int, int]:
    first = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    return sum(r["samples"] for r in first["train"]["ranks"]), first["val"]["samples"]


@pytest.fixture(scope="module")
def split_folders(tmp_path_factory):
    """train/ (3 classes x 12), val/ (x 4) and test/ (x 5) folders, packed."""
    root = tmp_path_factory.mktemp("sides")
    for split, count in (("train", 12), ("val", 4), ("test", 5)):
        colour_images(root / "src" / split, COLOURS, count, 20)
    packer_run("pack", root / "src", "-o", root / "wds", "-q")
    return root


def test_split_folders_train_on_train_and_validate_on_val(split_folders, tmp_path):
    said = train("fit", split_folders / "wds", "--out", tmp_path / "run", *COMMON)
    assert "val split name val: " in said and "training on its split train" in said
    assert "patience 5: stop after this many epochs" in said  # early stopping on split val
    assert epoch_counts(tmp_path / "run") == (36, 12)  # test's 15 samples never read
    tested = json.loads(train("evaluate", tmp_path / "run", split_folders / "wds", "--split",
                              "test", "--json", "--workers", "0"))
    assert tested["samples"] == 15 and tested["split"] == "test"


def test_another_split_validates_when_named(split_folders, tmp_path):
    train("fit", split_folders / "wds", "--out", tmp_path / "run", "--val-split-name", "test",
          *COMMON)
    assert epoch_counts(tmp_path / "run") == (36, 15)
    said = train("fit", split_folders / "wds", "--out", tmp_path / "again", "--val-split-name",
                 "train", *COMMON, expect=1)
    assert "name one other than train" in said


def test_without_a_validation_split_a_fraction_of_train_is_held_out(tmp_path):
    colour_images(tmp_path / "src", COLOURS, 20, 20)
    packer_run("pack", tmp_path / "src", "-o", tmp_path / "wds", "--split",
               "train=0.75,test=0.25", "-q")
    said = train("fit", tmp_path / "wds", "--out", tmp_path / "run", "--val-split", "0.2",
                 *COMMON)
    assert "validating on 0.2 of it held out" in said
    trained, validated = epoch_counts(tmp_path / "run")
    assert trained + validated == 45 and validated > 0  # the train split's 45, not all 60


def test_splits_without_train_and_names_without_splits_are_refused(tmp_path):
    colour_images(tmp_path / "src", COLOURS, 6, 20)
    packer_run("pack", tmp_path / "src", "-o", tmp_path / "ab", "--split", "a=0.5,b=0.5", "-q")
    packer_run("pack", tmp_path / "src", "-o", tmp_path / "plain", "-q")
    said = train("fit", tmp_path / "ab", "--out", tmp_path / "r1", *COMMON, expect=1)
    assert "its splits are a, b, and none is named train" in said
    said = train("fit", tmp_path / "plain", "--out", tmp_path / "r2", "--val-split-name", "val",
                 *COMMON, expect=1)
    assert "was packed without splits" in said


def test_one_sample_a_class_trains_without_validation(tmp_path):
    """--val-split auto holds out none of a class's only sample: the run says so and trains
    on all of them, packed or a loose folder (it stopped with an error before)."""
    colour_images(tmp_path / "src", COLOURS, 1, 20)
    packer_run("pack", tmp_path / "src", "-o", tmp_path / "wds", "-q")
    for data in (tmp_path / "wds", tmp_path / "src"):
        said = train("fit", data, "--out", tmp_path / data.name, "--batch-size", "3",
                     *COMMON[:2], *COMMON[4:])
        assert "val split 0.0: no class has two samples (3 samples of 3 classes)" in said
        assert "patience" not in said
        summary = json.loads((tmp_path / data.name / "summary.json").read_text())
        assert summary["best"]["val"] is None and summary["best"]["train"]["ranks"][0][
            "samples"] == 3
    said = train("fit", tmp_path / "wds", "--out", tmp_path / "given", "--val-split", "0.2",
                 *COMMON, expect=1)
    assert "--val-split 0.2 holds out no sample of the 3" in said  # given: still an error
