"""`--model torchvision:NAME` through a small stand-in torchvision (no download)."""

import json
import sys
import types

import pytest
import torch
from torch import nn

from conftest import colour_images
from conftest import run as packer_run
from packer.errors import PackerError
from train import models
from train_cli import train


class TinyNet(nn.Module):
    def __init__(self, num_classes: int):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 8),
                                      nn.ReLU())
        self.fc = nn.Linear(8, num_classes)

    def forward(self, x):
        return self.fc(self.features(x))


@pytest.fixture
def torchvision(monkeypatch):
    package = types.ModuleType("torchvision")
    package.models = types.ModuleType("torchvision.models")
    package.models.list_models = lambda module=None: ["tinynet", "resnet18"]

    def get_model(name, weights=None, num_classes=1000):
        assert name == "tinynet" and weights is None
        return TinyNet(num_classes)

    package.models.get_model = get_model
    monkeypatch.setitem(sys.modules, "torchvision", package)
    monkeypatch.setitem(sys.modules, "torchvision.models", package.models)
    return package


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """Two classes of small images, packed."""
    root = tmp_path_factory.mktemp("tv")
    colour_images(root / "images", [(220, 40, 40), (40, 40, 220)], per_class=12, spread=30)
    packer_run("pack", root / "images", "-o", root / "wds", "-q")
    return root / "wds"


def test_builds_a_torchvision_model_for_images(torchvision):
    model = models.build("torchvision:tinynet", "image", (3, 16, 16), 5, 0.0)
    assert isinstance(model, TinyNet) and model(torch.zeros(2, 3, 16, 16)).shape == (2, 5)


def test_without_torchvision_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchvision", None)
    with pytest.raises(PackerError, match="not installed") as error:
        models.build("torchvision:resnet18", "image", (3, 16, 16), 5, 0.0)
    assert "pip install torchvision" in str(error.value)
    assert "built-in models" in str(error.value)


def test_an_unknown_name_says_how_to_list_them(torchvision):
    with pytest.raises(PackerError, match="list_models") as error:
        models.build("torchvision:resnet181", "image", (3, 16, 16), 5, 0.0)
    assert "Did you mean resnet18" in str(error.value)


def test_torchvision_models_are_for_images_only(torchvision):
    with pytest.raises(PackerError, match="is for image data; this dataset holds vector"):
        models.build("torchvision:tinynet", "vector", (4,), 2, 0.0)


def test_weights_load_the_backbone_and_replace_the_head(torchvision, tmp_path):
    model = models.build("torchvision:tinynet", "image", (3, 16, 16), 3, 0.0)
    torch.save({"model": model.state_dict()}, tmp_path / "w.pt")
    fresh = models.build("torchvision:tinynet", "image", (3, 16, 16), 3, 0.0)
    report = models.load_weights(fresh, str(tmp_path / "w.pt"), "torchvision:tinynet", 3, None)
    assert "4 tensors loaded; 2 skipped; the head (fc.weight, fc.bias) replaced" in report
    assert torch.equal(fresh.features[0].weight, model.features[0].weight)
    assert not torch.equal(fresh.fc.weight, model.fc.weight)


def test_fit_and_fine_tune_through_the_cli(torchvision, images, tmp_path):
    common = ["--model", "torchvision:tinynet", "--image-size", "16", "--batch-size", "8",
              "--workers", "0", "--epochs", "1"]
    train("fit", images, "--out", tmp_path / "run", *common)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["epochs_run"] == 1
    train("fit", images, "--out", tmp_path / "tuned", "--weights", tmp_path / "run" / "best.pt",
          "--freeze-backbone", *common)
    before = torch.load(tmp_path / "run" / "best.pt", weights_only=True)["model"]
    after = torch.load(tmp_path / "tuned" / "last.pt", weights_only=True)["model"]
    assert torch.equal(before["features.4.weight"], after["features.4.weight"])
    assert not torch.equal(before["fc.weight"], after["fc.weight"])


def test_cli_errors_are_one_paragraph(monkeypatch, images, tmp_path):
    monkeypatch.setitem(sys.modules, "torchvision", None)
    output = train("fit", images, "--out", tmp_path / "x", "--model", "torchvision:resnet18",
                   "--workers", "0", expect=1)
    assert output.startswith("Error: --model torchvision:resnet18 needs torchvision")
    assert "Traceback" not in output
