"""MixUp, CutMix, focal loss, early stopping with the best weights kept, the plots."""

import json

import pytest
import torch
import torch.nn.functional as F

from conftest import image_bytes
from conftest import run as packer_run
from train.augment import augment_images, mix
from train.losses import FocalLoss
from train_cli import train


def test_mixup_mixes_inputs_and_targets_with_one_weight():
    inputs = torch.randn(6, 3, 8, 8)
    targets = torch.eye(6)  # sample i is class i: the mixed targets say who was mixed
    mixed, soft = mix(inputs, targets, 0.4, 0.0, torch.Generator().manual_seed(1))
    assert torch.allclose(soft.sum(dim=1), torch.ones(6))
    lams = set()
    for i in range(6):
        mixed_with = [j for j in soft[i].nonzero().flatten().tolist() if j != i]
        partner = mixed_with[0] if mixed_with else i
        lam = soft[i, i].item() if mixed_with else 1.0
        if mixed_with:
            lams.add(round(lam, 6))
        assert torch.allclose(mixed[i], lam * inputs[i] + (1 - lam) * inputs[partner],
                              atol=1e-5)
    assert len(lams) == 1  # one weight for the batch


def test_cutmix_pastes_a_box_and_weights_targets_by_the_pixels_kept():
    inputs = torch.arange(8.0).view(8, 1, 1, 1).expand(8, 3, 16, 16).contiguous()
    targets = torch.eye(8)
    mixed, soft = mix(inputs, targets, 0.0, 1.0, torch.Generator().manual_seed(3))
    for i in range(8):
        own = (mixed[i] == i).float().mean().item()
        assert soft[i, i].item() == pytest.approx(own, abs=1e-6)
        others = [v for v in mixed[i].unique().tolist() if v != i]
        assert len(others) <= 1  # one box, from one partner
        if others:
            assert soft[i, int(others[0])].item() == pytest.approx(1 - own, abs=1e-6)
    assert not torch.equal(mixed, inputs)


def test_no_alpha_leaves_the_batch_alone():
    inputs, targets = torch.randn(4, 3, 8, 8), torch.eye(4)
    mixed, soft = mix(inputs, targets, 0.0, 0.0, torch.Generator())
    assert mixed is inputs and soft is targets


def test_light_augmentation_never_flips():
    """A left-right ramp stays a left-right ramp under light, not always under flip."""
    ramp = torch.linspace(0, 1, 32).expand(64, 3, 32, 32).contiguous()
    light = augment_images(ramp, torch.Generator().manual_seed(0), "light")
    rising = (light[..., -1] - light[..., 0]).mean(dim=(1, 2))
    assert (rising > 0).all()
    flipped = augment_images(ramp, torch.Generator().manual_seed(0), "flip")
    assert ((flipped[..., -1] - flipped[..., 0]).mean(dim=(1, 2)) < 0).any()
    assert augment_images(ramp, torch.Generator(), "none") is ramp


@pytest.mark.parametrize("weight", [None, torch.tensor([1.0, 3.0, 0.5])])
def test_focal_loss_at_gamma_0_is_cross_entropy(weight):
    logits, labels = torch.randn(10, 3), torch.randint(0, 3, (10,))
    focal = FocalLoss(0.0, weight)(logits, labels)
    assert focal.item() == pytest.approx(F.cross_entropy(logits, labels, weight=weight).item(),
                                         rel=1e-5)
    soft = F.softmax(torch.randn(10, 3), dim=1)
    assert FocalLoss(0.0, weight)(logits, soft).item() == pytest.approx(
        F.cross_entropy(logits, soft, weight=weight).item(), rel=1e-5)
    assert FocalLoss(2.0, weight)(logits, labels) < focal  # each term scaled by (1 - p)^2


@pytest.fixture(scope="module")
def noise(tmp_path_factory):
    """Two classes of random noise: nothing to learn, so validation stops improving."""
    root = tmp_path_factory.mktemp("noise")
    for i in range(48):
        (root / "src" / f"c{i % 2}").mkdir(parents=True, exist_ok=True)
        (root / "src" / f"c{i % 2}" / f"{i}.png").write_bytes(image_bytes(i, "PNG", (16, 16)))
    packer_run("pack", root / "src", "-o", root / "wds", "-q")
    return root / "wds"


def test_early_stopping_keeps_the_best_epoch_and_draws_the_plots(noise, tmp_path):
    out = tmp_path / "run"
    output = train("fit", noise, "--out", out, "--epochs", "12", "--patience", "2", "--lr",
                   "3e-3", "--workers", "0", "--val-split", "0.25", "--mixup", "0.2",
                   "--cutmix", "1.0", "--loss", "focal")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stopped_early"] and summary["epochs_run"] < 12
    # patience counts from the last better accuracy; an equal one at a lower loss may
    # still be the best epoch after it
    assert summary["best_epoch"] <= summary["epochs_run"] <= summary["best_epoch"] + 2
    assert torch.load(out / "best.pt", weights_only=True)["epoch"] + 1 == summary["best_epoch"]
    assert f"best epoch {summary['best_epoch']} of {summary['epochs_run']} (stopped early)" \
        in output
    assert summary["chosen"]["image_size"]["value"] == 16 and "lr" not in summary["chosen"]
    for plot in ("curves.png", "confusion.png"):
        assert (out / plot).read_bytes()[:4] == b"\x89PNG"


def test_mixup_is_refused_for_regression_and_cutmix_for_non_images(tmp_path):
    (tmp_path / "t.csv").write_text("a,y\n" + "".join(f"{i},{i % 3}\n" for i in range(40)))
    packer_run("pack", tmp_path / "t.csv", "--to", "hdf5", "--label-column", "y", "--task",
               "regress", "-o", tmp_path / "t.h5", "-q")
    output = train("fit", tmp_path / "t.h5", "--mixup", "0.2", "--out", tmp_path / "r",
                   expect=1)
    assert "--mixup and --cutmix mix class targets" in output
    packer_run("pack", tmp_path / "t.csv", "--to", "hdf5", "--label-column", "y", "-o",
               tmp_path / "c.h5", "-q")
    output = train("fit", tmp_path / "c.h5", "--cutmix", "1", "--out", tmp_path / "r", expect=1)
    assert "--cutmix pastes a box of an image" in output
