"""Defaults from the data: image size, batch, length, capacity, norm, cache, --lr auto."""

import json
import math

import numpy as np
import pytest
import torch

from conftest import image_bytes
from conftest import run as packer_run
from train import cache, lr_range, recipe
from train.config import TrainConfig
from train.data import DataInfo, describe
from train.datasets import datasets
from train.models import build
from train_cli import train


def packed_images(root, size, count=24):
    """`count` PNGs of `size` (width, height) in two class folders, packed."""
    for i in range(count):
        folder = root / "src" / f"c{i % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{i}.png").write_bytes(image_bytes(i, "PNG", size=size))
    packer_run("pack", root / "src", "-o", root / "wds", "-q")
    return root / "wds"


def chosen(path, **options):
    config = TrainConfig(data=str(path), val_split=0.25, **options)
    info = describe(config)
    picks = recipe.choose_image_size(config, info)
    train_set, _ = datasets(info, config)
    picks += recipe.choose(config, info, train_set.total, 1)
    return config, info, {p.name: p for p in picks}


def test_a_32_pixel_image_set_keeps_its_size_and_gets_enough_epochs(tmp_path):
    config, info, picks = chosen(packed_images(tmp_path, (32, 32)))
    assert config.image_size == 32 and info.input_shape == (3, 32, 32)
    assert "own size" in picks["image_size"].why
    assert config.batch_size == 8  # 18 training images: no fewer than 8 a batch
    assert config.epochs == recipe.MAX_EPOCHS  # 3 steps an epoch: the budget needs more
    assert (config.width, config.norm, config.cache) == (16, "group", "ram")
    assert config.patience == recipe.MAX_EPOCHS // 4


def test_a_200_by_160_image_set_keeps_its_shape(tmp_path):
    config, info, picks = chosen(packed_images(tmp_path, (200, 160), count=8))
    assert config.image_size == (160, 200) and info.input_shape == (3, 160, 200)
    assert picks["image_size"].line().startswith("  image size 200x160: the images' own")
    images = next(iter(torch.utils.data.DataLoader(datasets(info, config)[0], batch_size=2)))
    assert images["png"].shape == (2, 3, 160, 200)


def test_images_of_several_sizes_take_a_square_below_the_median():
    size, why = recipe.image_size([(64, 80), (100, 90), (160, 120), (130, 64)])
    assert size == 72 and "sizes differ" in why  # the short sides' median 77, down to 8s
    assert recipe.image_size([(1000, 800)] * 3)[0] == (205, 256)


def test_a_table_gets_a_small_mlp_every_row_and_the_step_budget(tmp_path):
    rng = np.random.default_rng(0)
    rows = ["a,b,c,y"] + [f"{x:.4f},{y:.4f},{z:.4f},{int(x > 0)}"
                          for x, y, z in rng.normal(size=(400, 3))]
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n")
    packer_run("pack", tmp_path / "t.csv", "--to", "hdf5", "--label-column", "y", "-o",
               tmp_path / "t.h5", "-q")
    config, info, picks = chosen(tmp_path / "t.h5")
    rows = datasets(info, config)[0].total
    assert info.kind == "vector" and "image_size" not in picks and 280 < rows < 320
    assert config.batch_size == 16  # about 300 rows: 16 or more steps an epoch
    assert (config.width, config.dropout, config.weight_decay) == (64, 0.2, 0.1)
    budget = math.ceil(2000 / math.ceil(rows / 16))
    assert config.epochs == min(budget, recipe.MAX_EPOCHS) and config.norm == "batch"


def test_group_norm_for_a_batch_of_8():
    info = DataInfo("image", ["png"], "cls", "classify", ["a", "b"], [50, 50], (3, 16, 16), None)
    config = TrainConfig(batch_size=8, epochs=1)
    picks = {p.name: p for p in recipe.choose(config, info, 100, 1)}
    assert config.norm == "group" and "GroupNorm for a batch of 8" in picks["norm"].why
    model = build("resnet", "image", (3, 16, 16), 2, 0.0, 16, config.norm)
    kinds = {type(m).__name__ for m in model.modules()}
    assert "GroupNorm" in kinds and "BatchNorm2d" not in kinds
    recipe.choose(config := TrainConfig(batch_size=32, epochs=1), info, 100, 1)
    assert config.norm == "batch"


def test_the_cache_is_chosen_within_a_third_of_the_memory(monkeypatch):
    info = DataInfo("image", ["png"], "cls", "classify", ["a"], [100], (3, 16, 16), None)
    monkeypatch.setattr(cache, "available_memory", lambda: 3 * 10 ** 9)
    config = TrainConfig(epochs=1)
    recipe.choose(config, info, 100, 1)
    assert config.cache == "ram"
    monkeypatch.setattr(cache, "available_memory", lambda: 3 * 100 * 3 * 16 * 16)
    recipe.choose(config := TrainConfig(epochs=1), info, 100, 1)
    assert config.cache == "off"  # 100 images of 768 bytes and their labels: over the third
    assert cache.decide("ram", 100, 10 ** 9)[0] and not cache.decide("off", 1, 1)[0]


def test_lr_auto_prints_and_uses_a_rate_from_the_range_test(tmp_path, monkeypatch):
    sweeps = []

    def recorded(*args, **kwargs):
        sweeps.append(real(*args, **kwargs))
        return sweeps[-1]

    real = lr_range.sweep
    monkeypatch.setattr(lr_range, "sweep", recorded)
    data = packed_images(tmp_path, (16, 16), count=16)
    output = train("fit", data, "--out", tmp_path / "run", "--epochs", "1", "--workers", "0")
    (result,) = sweeps
    lr = json.loads((tmp_path / "run" / "summary.json").read_text())["chosen"]["lr"]["value"]
    assert min(result["lrs"]) <= lr <= max(result["lrs"])
    assert lr == pytest.approx(result["suggested_lr"], rel=1e-2)
    assert f"lr {lr}: a range test of {len(result['lrs'])} steps" in output
    saved = torch.load(tmp_path / "run" / "last.pt", weights_only=True)
    assert saved["config"]["lr"] == pytest.approx(lr, rel=1e-2)
    assert saved["optimizer"]["param_groups"][0]["initial_lr"] == saved["config"]["lr"]


def test_an_explicit_lr_skips_the_range_test(tmp_path, monkeypatch):
    monkeypatch.setattr(lr_range, "sweep", None)  # called: a TypeError
    data = packed_images(tmp_path, (16, 16), count=8)
    output = train("fit", data, "--out", tmp_path / "run", "--epochs", "1", "--workers", "0",
                   "--lr", "1e-3", "--val-split", "0")
    assert "range test" not in output and "patience" not in output


def test_check_writes_the_augmented_grid_beside_the_raw_one(tmp_path):
    data = packed_images(tmp_path, (24, 24), count=16)
    train("check", data, "--out", tmp_path / "check", "--workers", "0", "--augment", "strong",
          "--cutmix", "1.0")
    raw = (tmp_path / "check" / "check_grid.png").read_bytes()
    augmented = (tmp_path / "check" / "check_augmented.png").read_bytes()
    assert augmented[:4] == b"\x89PNG" and augmented != raw


def test_check_draws_every_augmentation_policy_on_the_same_images(tmp_path, monkeypatch):
    from train import plots

    drawn = {}
    real = plots.rows_grid

    def keep(rows, titles, path, title):
        drawn.update(rows)
        return real(rows, titles, path, title)

    monkeypatch.setattr(plots, "rows_grid", keep)
    data = packed_images(tmp_path, (24, 24), count=16)
    output = train("check", data, "--out", tmp_path / "check", "--workers", "0")
    assert f"policies_grid: {tmp_path / 'check' / 'check_policies.png'}" in output
    assert (tmp_path / "check" / "check_policies.png").read_bytes()[:4] == b"\x89PNG"
    assert list(drawn) == ["none", "light", "flip", "strong", "randaugment", "trivialaugment"]
    assert all(len(row) == 6 for row in drawn.values())
    for policy in list(drawn)[1:]:  # each changes the images it is shown on
        assert not all(torch.equal(a, b) for a, b in zip(drawn["none"], drawn[policy],
                                                         strict=True)), policy
