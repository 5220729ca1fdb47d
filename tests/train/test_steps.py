"""What an optimizer step is made of: --accumulate; and the weights' average, --ema."""

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from conftest import run as packer_run
from train.cli import cli

FIXED = ["--val-split", "0", "--epochs", "2", "--workers", "0", "--lr", "1e-2", "--schedule",
         "constant", "--warmup-epochs", "0", "--dropout", "0", "--weight-decay", "0.01",
         "--width", "16", "--cache", "off"]


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """128 rows of 3 features, two classes by a linear rule: an MLP (no BatchNorm)."""
    root = tmp_path_factory.mktemp("steps")
    features = np.random.default_rng(4).normal(size=(128, 3))
    rows = ["a,b,c,y"] + [",".join([*(f"{v:.5f}" for v in x), "pos" if x @ [1, -1, .5] > 0
                                    else "neg"]) for x in features]
    (root / "t.csv").write_text("\n".join(rows) + "\n")
    packer_run("pack", root / "t.csv", "--to", "hdf5", "--label-column", "y", "--task",
               "classify", "-o", root / "t.h5", "-q")
    return root / "t.h5"


def train(*args) -> str:
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_four_batches_of_eight_step_as_one_of_32(table, tmp_path):
    """The model has no BatchNorm: with it, batches of 8 would be normalised by their
    own statistics, and the two would differ by that alone."""
    train("fit", table, "--out", tmp_path / "whole", "--batch-size", "32", *FIXED)
    train("fit", table, "--out", tmp_path / "parts", "--batch-size", "8", "--accumulate", "4",
          *FIXED)
    whole = torch.load(tmp_path / "whole" / "last.pt", weights_only=True)
    parts = torch.load(tmp_path / "parts" / "last.pt", weights_only=True)
    assert parts["scheduler"]["last_epoch"] == whole["scheduler"]["last_epoch"] == 8
    for name, value in whole["model"].items():
        torch.testing.assert_close(parts["model"][name], value, rtol=1e-5, atol=1e-6)
    train("fit", table, "--out", tmp_path / "eights", "--batch-size", "8", *FIXED)
    eights = torch.load(tmp_path / "eights" / "last.pt", weights_only=True)["model"]
    assert not all(torch.allclose(eights[k], whole["model"][k]) for k in eights)


def test_the_average_of_the_weights_is_validated_and_saved(table, tmp_path):
    out = tmp_path / "ema"
    options = [o if o != "0" or i != 1 else "0.25" for i, o in enumerate(FIXED)]  # a split
    said = train("fit", table, "--out", out, "--batch-size", "16", "--ema", "--ema-decay",
                 "0.9", "--monitor", "accuracy", *options)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all(0 <= r["val_ema"]["accuracy"] <= 1 and r["val_ema"]["samples"] == 32
               for r in records)
    assert said.count("EMA val accuracy") == 2
    last = torch.load(out / "last.pt", weights_only=True)
    best_ema = torch.load(out / "best_ema.pt", weights_only=True)
    assert last["ema"]["n_averaged"].item() == 2 * 6  # one update a step: 96 rows / 16
    assert not all(torch.equal(best_ema["model"][k], last["model"][k]) for k in last["model"])
    assert all(r["val_ema"]["loss"] != r["val"]["loss"] for r in records)  # other weights
    evaluated = json.loads(train("evaluate", out / "best_ema.pt", table, "--workers", "0",
                                 "--json").splitlines()[-1])
    assert evaluated["samples"] == 128 and 0.5 < evaluated["accuracy"] <= 1


def test_lr_find_sweeps_from_1e_6_to_10(table, tmp_path):
    train("lr-find", table, "--out", tmp_path / "lr", "--steps", "15", "--workers", "0",
          "--batch-size", "16")
    rates = json.loads((tmp_path / "lr" / "lr_find.json").read_text())["lrs"]
    assert rates[0] == pytest.approx(1e-6)
    assert rates[1] / rates[0] == pytest.approx(10 ** (7 / 14))  # seven decades in 14 steps


def test_brightness_moves_by_a_tenth_of_the_pixel_range_as_the_help_says():
    from train.augment import augment_images
    from train.inputs import IMAGE_MEAN, IMAGE_STD

    grey = torch.full((256, 3, 8, 8), (0.5 - IMAGE_MEAN) / IMAGE_STD)  # flat: no contrast
    out = augment_images(grey, torch.Generator().manual_seed(0), "light",
                         ((IMAGE_MEAN,), (IMAGE_STD,)))
    shift = (out.mean(dim=(1, 2, 3)) - grey[0, 0, 0, 0]) * IMAGE_STD  # in pixel range
    assert shift.abs().max() <= 0.1 + 1e-6 and shift.abs().max() > 0.09


@pytest.mark.parametrize("policy", ["randaugment", "trivialaugment"])
def test_library_policies_draw_per_image_from_the_run_seed(policy):
    from train.augment import augment_images
    from train.inputs import IMAGE_MEAN, IMAGE_STD

    norm = ((IMAGE_MEAN,), (IMAGE_STD,))
    images = (torch.rand(32, 3, 16, 16) - IMAGE_MEAN) / IMAGE_STD
    first = augment_images(images, torch.Generator().manual_seed(3), policy, norm)
    again = augment_images(images, torch.Generator().manual_seed(3), policy, norm)
    other = augment_images(images, torch.Generator().manual_seed(4), policy, norm)
    assert first.shape == images.shape and torch.equal(first, again)
    assert not torch.equal(first, other)
    changed = [not torch.equal(a, b) for a, b in zip(first, images, strict=True)]
    assert 0 < sum(changed)  # drawn per image: not one operation for the whole batch
    differences = {round(float((a - b).abs().mean()), 4) for a, b in zip(first, images,
                                                                          strict=True)}
    assert len(differences) > 4
    state = torch.random.get_rng_state()
    augment_images(images, torch.Generator().manual_seed(3), policy, norm)
    assert torch.equal(state, torch.random.get_rng_state())  # torch's own draws untouched


def test_random_erasing_blanks_a_box_of_each_image_at_its_chance():
    from train.augment import augment_images

    images = torch.ones(16, 3, 16, 16)
    erased = augment_images(images, torch.Generator().manual_seed(0), "none", erasing=1.0)
    assert all(0 < (image != 1).float().mean() < 1 for image in erased)
    kept = augment_images(images, torch.Generator().manual_seed(0), "none", erasing=0.0)
    assert torch.equal(kept, images)


def test_a_library_policy_trains_and_shows_on_the_check_grid(tmp_path):
    from conftest import colour_images

    colour_images(tmp_path / "images", [(200, 30, 30), (30, 200, 30)], 12, 20)
    packer_run("pack", tmp_path / "images", "-o", tmp_path / "wds", "-q")
    common = ["--image-size", "16", "--batch-size", "8", "--workers", "0"]
    train("fit", tmp_path / "wds", "--out", tmp_path / "run", "--epochs", "1", "--augment",
          "trivialaugment", "--random-erasing", "0.5", *common)
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["epochs_run"] == 1
    said = train("check", tmp_path / "wds", "--out", tmp_path / "check", "--augment",
                 "randaugment", *common)
    assert (tmp_path / "check" / "check_augmented.png").stat().st_size > 1000
    assert "Traceback" not in said


def test_random_erasing_is_refused_where_there_is_no_image(table, tmp_path):
    result = CliRunner().invoke(cli, ["fit", str(table), "--out", str(tmp_path / "r"),
                                      "--random-erasing", "0.5", *FIXED])
    assert result.exit_code == 1 and "--random-erasing blanks a box of an image" in result.output


def test_log_every_writes_step_records_beside_the_epochs(table, tmp_path):
    train("fit", table, "--out", tmp_path / "run", "--batch-size", "32", "--log-every", "3",
          *FIXED)
    records = [json.loads(line) for line in
               (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "step" in r]
    epochs = [r for r in records if "step" not in r]
    assert [r["step"] for r in steps] == [3, 6] and len(epochs) == 2  # 4 steps an epoch
    assert all(set(r) == {"step", "epoch", "loss", "lr"} for r in steps)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["epochs_run"] == 2


def test_tensorboard_holds_per_class_scores_and_the_confusion(table, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    train("fit", table, "--out", tmp_path / "run", "--batch-size", "32", *FIXED,
          "--val-split", "0.25")
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard"),
                              size_guidance={"tensors": 0}).Reload()
    scalars = set(events.Tags()["scalars"])
    assert {"val_per_class/pos/f1", "val_per_class/neg/recall", "lr"} <= scalars
    [text] = [tag for tag in events.Tags()["tensors"] if tag.startswith("val/confusion")]
    table_text = events.Tensors(text)[0].tensor_proto.string_val[0].decode()
    assert "predicted | neg | pos |" in table_text and table_text.count("\n") == 3


def test_a_short_batch_weighs_each_sample_as_a_full_batch_does():
    """A stream's last batch may hold one sample: taken as a whole batch, that sample's
    gradient would be a full step of its own (sixteen times its weight in a batch of 16),
    and one misclassified sample kicked a fine-tuned backbone off its minimum."""
    from types import SimpleNamespace

    from train.config import TrainConfig
    from train.step import train_step

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    run = SimpleNamespace(model=model, optimizer=optimizer, loss_fn=torch.nn.CrossEntropyLoss(),
                          config=TrainConfig(batch_size=16), scaler=None, amp_dtype=None,
                          device=torch.device("cpu"), world=1, ema=None,
                          info=SimpleNamespace(task="classify"),
                          scheduler=torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0))
    inputs, targets = torch.randn(2, 3), torch.tensor([0, 1])
    train_step(run, inputs.repeat(8, 1), targets.repeat(8))
    full = model.weight.grad.clone()
    train_step(run, inputs, targets)
    torch.testing.assert_close(model.weight.grad, full * 2 / 16)


@pytest.mark.parametrize("kind, shape, option, laid_out", [
    ("image", (3, 16, 16), True, True), ("image", (3, 16, 16), False, False),
    ("sequence", (2, 32), True, False)])
def test_image_models_train_channels_last_unless_told_not_to(kind, shape, option, laid_out):
    """Channels-last convolutions are 1.3 to 1.7 times as fast on the CPU too (a
    MobileNetV2 fine-tuned on 2 cores), so image runs take them by default."""
    from train.config import TrainConfig
    from train.data import DataInfo
    from train.run import build

    info = DataInfo(kind=kind, inputs=["jpg" if kind == "image" else "x.npy"], label="cls",
                    task="classify", classes=["a", "b"], class_counts=[1, 1],
                    input_shape=shape, stats=None)
    config = TrainConfig(lr=1e-3, batch_size=4, epochs=1, device="cpu", channels_last=option)
    run = build(config, 1, info)
    convolutions = [p for p in run.model.parameters() if p.ndim == 4]
    assert convolutions or kind != "image"
    layout = torch.channels_last if laid_out else torch.contiguous_format
    assert all(p.is_contiguous(memory_format=layout) for p in convolutions)
    assert laid_out == any(not p.is_contiguous() for p in convolutions)
    assert TrainConfig().channels_last
