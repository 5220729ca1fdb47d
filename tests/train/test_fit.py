"""The trainer on small learnable data, on the CPU."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from conftest import COLOURS, FIT_OPTIONS, ROOT, colour_images
from conftest import run as packer_run
from train.cli import cli
from train_cli import train


def test_fit_reaches_high_validation_accuracy(colours, tmp_path):
    out = tmp_path / "run"
    train("fit", colours / "wds", "--out", out, "--epochs", "6", "--val-split", "0.25",
          *FIT_OPTIONS)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["best"]["val"]["accuracy"] >= 0.9
    assert (out / "curves.png").exists() and (out / "confusion.png").exists()
    assert summary["chosen"]["cache"]["value"] == "ram" and not summary["stopped_early"]
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 6 and "data_wait_share" in json.loads(lines[0])["train"]
    best = torch.load(out / "best.pt", weights_only=True)
    assert set(best) >= {"model", "optimizer", "scheduler", "epoch", "config"}
    assert any(p.name.startswith("events") for p in (out / "tensorboard").iterdir())


@pytest.mark.parametrize("cache", ["ram", "off"])
def test_resume_gives_the_same_weights(colours, tmp_path, cache):
    constant = [*FIT_OPTIONS, "--schedule", "constant", "--warmup-epochs", "0", "--dropout", "0.2",
                "--cache", cache]
    train("fit", colours / "wds", "--out", tmp_path / "a", "--epochs", "2", *constant)
    train("fit", colours / "wds", "--out", tmp_path / "a", "--epochs", "4", "--resume", *constant)
    train("fit", colours / "wds", "--out", tmp_path / "b", "--epochs", "4", *constant)
    resumed = torch.load(tmp_path / "a" / "last.pt", weights_only=True)["model"]
    straight = torch.load(tmp_path / "b" / "last.pt", weights_only=True)["model"]
    assert all(torch.equal(resumed[k], straight[k]) for k in straight)


@pytest.mark.parametrize("amp", ["off", "bf16", "fp16"])
def test_amp_paths_on_the_cpu(colours, tmp_path, amp):
    train("fit", colours / "wds", "--out", tmp_path / amp, "--epochs", "1", "--amp", amp,
          *FIT_OPTIONS)
    summary = json.loads((tmp_path / amp / "summary.json").read_text())
    assert summary["epochs_run"] == 1 and math.isfinite(summary["best"]["train"]["loss"])
    scaler = torch.load(tmp_path / amp / "last.pt", weights_only=True)["scaler"]
    assert (scaler is not None) == (amp == "fp16")  # fp16 steps through a gradient scaler


def test_bad_inputs_fail_before_training(colours, tmp_path):
    assert "--model mlp is for vector data" in train(
        "fit", colours / "wds", "--out", tmp_path / "x", "--model", "mlp", expect=1)
    assert "--num-classes 5, but" in train(
        "fit", colours / "wds", "--out", tmp_path / "x", "--num-classes", "5", expect=1)
    assert "--freeze-backbone needs --pretrained or --weights" in train(
        "fit", colours / "wds", "--out", tmp_path / "x", "--freeze-backbone", expect=1)
    unlabelled = tmp_path / "unlabelled"
    packer_run("pack", colours / "images", "--unlabelled", "-o", unlabelled, "-q")
    assert "no labels" in train("fit", unlabelled, "--out", tmp_path / "x", expect=1)
    assert not (tmp_path / "x").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_device_cuda_without_a_gpu_is_a_clear_error(colours, tmp_path):
    output = train("fit", colours / "wds", "--out", tmp_path / "x", "--device", "cuda",
                   *FIT_OPTIONS, expect=1)
    assert "--device cuda: PyTorch sees no CUDA GPU" in output and "Traceback" not in output


def test_bench_train_packed_only(colours):
    command = [sys.executable, "tools/bench_train.py", "--packed", str(colours / "wds"),
               "--packed-only", "--epochs", "1", "--image-size", "16", "--workers", "0",
               "--batch-size", "16", "--device", "cpu", "--amp", "off"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300,
                            cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "packed shards" in result.stdout and "loose files" not in result.stdout
    assert "--device cpu --amp off" in result.stdout


def test_fit_reads_an_s3_dataset_through_the_cache_it_is_given(colours, s3, tmp_path):
    from packer.storage.client import client
    from s3_server import cache_peak

    url = f"s3://{s3}/wds"
    packer_run("pack", colours / "images", "-o", url, "--max-count", "15", "-q")
    shards = [o["Size"] for o in client().list_objects_v2(Bucket=s3)["Contents"]
              if o["Key"].endswith(".tar")]
    cache, limit = tmp_path / "cache", 3 * max(shards)
    assert limit < sum(shards)  # parts are removed to make room
    with cache_peak(cache, limit) as peak:
        train("fit", url, "--out", tmp_path / "run", "--epochs", "2", "--val-split", "0.25",
              "--cache-dir", cache, "--cache-limit", limit, "--image-size", "16", "--batch-size",
              "16", "--workers", "2", "--lr", "3e-3")
    assert [p for p in cache.rglob("shard-*.tar") if p.is_file()] and 0 < peak[0] <= limit
    assert not (tmp_path / "cache-home" / "packer" / "parts").exists()  # not the default
    bad = CliRunner().invoke(cli, ["fit", url, "--cache-limit", "lots"])
    assert bad.exit_code == 2 and "'lots' is not a size" in bad.output
    assert "--cache-limit 20GB" in CliRunner().invoke(cli, ["check", "--help"]).output


def test_overfit_check_and_lr_find(colours, tmp_path):
    assert "overfit: loss" in train("overfit", colours / "wds", "--samples", "32", *FIT_OPTIONS)
    report = train("check", colours / "wds", "--out", tmp_path / "check", *FIT_OPTIONS[:-2])
    assert "input_shape: [3, 16, 16]" in report and "finite_gradients': True" in report
    assert (tmp_path / "check" / "check_grid.png").read_bytes()[:4] == b"\x89PNG"
    found = train("lr-find", colours / "wds", "--out", tmp_path / "lr", "--steps", "20",
                  *FIT_OPTIONS)
    assert "suggested learning rate" in found
    assert (tmp_path / "lr" / "lr_find.png").read_bytes()[:4] == b"\x89PNG"


def test_fit_from_a_loose_folder(colours, tmp_path):
    result = CliRunner().invoke(cli, ["fit", str(colours / "images"), "--val",
                                      str(colours / "wds"), "--out", str(tmp_path / "v")])
    assert result.exit_code == 1 and "pack DATA first" in result.output
    train("fit", colours / "images", "--out", tmp_path / "loose", "--epochs", "1", *FIT_OPTIONS)
    summary = json.loads((tmp_path / "loose" / "summary.json").read_text())
    assert summary["epochs_run"] == 1  # 120 images: small data, 0.2 held out, stratified
    assert summary["best"]["val"]["samples"] == 24 and summary["chosen"]["val_split"]


def test_regression_from_a_packed_table(tmp_path):
    rng = np.random.default_rng(1)
    features = rng.normal(size=(400, 3))
    target = features @ [1.5, -2.0, 0.5] + 0.1 * rng.normal(size=400)
    rows = ["a,b,c,y"] + [",".join(f"{v:.6f}" for v in (*x, t))
                          for x, t in zip(features, target, strict=True)]
    (tmp_path / "reg.csv").write_text("\n".join(rows) + "\n")
    packer_run("pack", tmp_path / "reg.csv", "--to", "hdf5", "--label-column", "y", "--task",
               "regress", "-o", tmp_path / "reg.h5", "-q")
    train("fit", tmp_path / "reg.h5", "--out", tmp_path / "run", "--epochs", "15", "--workers",
          "0", "--lr", "3e-3", "--batch-size", "32")
    best = json.loads((tmp_path / "run" / "summary.json").read_text())["best"]["val"]
    assert best["rmse"] < 0.3  # the noise is 0.1; the target's spread is about 2.5


def test_multilabel_from_a_table_with_two_label_columns(tmp_path):
    rng = np.random.default_rng(2)
    features = rng.normal(size=(300, 4))
    first, second = features[:, 0] > 0, features[:, 1] + features[:, 2] > 0
    rows = ["a,b,c,d,l1,l2"] + [",".join([*(f"{v:.5f}" for v in x), str(int(p)), str(int(q))])
                                for x, p, q in zip(features, first, second, strict=True)]
    (tmp_path / "ml.csv").write_text("\n".join(rows) + "\n")
    packer_run("pack", tmp_path / "ml.csv", "--to", "hdf5", "--label-column", "l1,l2", "-o",
               tmp_path / "ml.h5", "-q")
    said = train("fit", tmp_path / "ml.h5", "--out", tmp_path / "run", "--epochs", "12",
                 "--workers", "0", "--lr", "3e-3", "--batch-size", "32", "--val-split", "0.2")
    best = json.loads((tmp_path / "run" / "summary.json").read_text())["best"]["val"]
    assert best["accuracy"] > 0.85  # the share of labels right
    assert "monitor map" in said and "val mAP" in said  # chosen from the data, each epoch
    assert set(best["per_label"]) == {"l1", "l2"} and best["map"] > 0.9
    assert all(s["ap"] > 0.85 and s["f1"] > 0.8 for s in best["per_label"].values())
    shown = train("evaluate", tmp_path / "run", tmp_path / "ml.h5", "--out", tmp_path / "ev",
                  "--workers", "0")
    assert "mAP" in shown and "l2" in shown
    rows = (tmp_path / "ev" / "per_label.csv").read_text().splitlines()
    assert rows[0] == "label,precision,recall,f1,ap,samples" and len(rows) == 3


def test_sidecars_that_only_some_samples_have_do_not_stop_training(tmp_path):
    images = colour_images(tmp_path / "images", COLOURS[:2], per_class=8, spread=40)
    (images / "c0" / "3.json").write_text('{"photographer": "a"}')
    (images / "c1" / "notes").write_text("a stray file: no image, so a bad sample")
    packer_run("pack", images, "-o", tmp_path / "wds", "-q")
    out = tmp_path / "run"
    said = train("fit", tmp_path / "wds", "--out", out, "--epochs", "1", "--val-split", "0.25",
                 *FIT_OPTIONS)
    assert json.loads((out / "summary.json").read_text())["best"]["epoch"] == 1
    assert "1 damaged sample replaced this epoch" in said
    [damaged] = json.loads((out / "metrics.jsonl").read_text())["damaged_samples"]
    assert damaged["key"] == "c1/notes" and "no jpg field to decode" in damaged["reasons"][0]


@pytest.mark.parametrize("damage", ["cut", "zeros", "foreign"])
def test_a_damaged_last_checkpoint_is_one_message_on_resume(colours, tmp_path, damage):
    out = tmp_path / "run"
    train("fit", colours / "wds", "--out", out, "--epochs", "1", *FIT_OPTIONS)
    last = out / "last.pt"
    if damage == "cut":
        last.write_bytes(last.read_bytes()[:len(last.read_bytes()) // 2])
    elif damage == "zeros":
        last.write_bytes(bytes(last.stat().st_size))
    else:
        torch.save({"weights": torch.zeros(3)}, last)
    result = CliRunner().invoke(cli, ["fit", str(colours / "wds"), "--out", str(out),
                                      "--epochs", "2", "--resume", *FIT_OPTIONS])
    assert result.exit_code == 1, result.output
    assert f"{last}: " in result.output and "without --resume" in result.output
    assert "Traceback" not in result.output and "Aborted" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_fit_reads_raw_pixel_datasets_without_options(colours, tmp_path):
    from train.config import TrainConfig
    from train.data import describe

    packer_run("pack", colours / "images", "--to", "lmdb", "--resize", "12x12", "--encode",
               "raw", "-o", tmp_path / "raw", "-q")
    info = describe(TrainConfig(data=str(tmp_path / "raw")))
    assert info.kind == "image" and info.inputs == ["rgb.npy"] and info.decoded_images
    out = tmp_path / "run"
    output = train("fit", tmp_path / "raw", "--out", out, "--epochs", "3", "--val-split", "0.25",
                   "--batch-size", "16", "--workers", "0", "--lr", "3e-3")
    assert "image size 12: the images' own size" in output
    assert json.loads((out / "summary.json").read_text())["best"]["val"]["accuracy"] >= 0.8


def test_fit_ends_on_its_closing_line_and_gives_json_when_asked(colours, tmp_path):
    plain = train("fit", colours / "wds", "--out", tmp_path / "a", "--epochs", "1", *FIT_OPTIONS)
    assert plain.strip().splitlines()[-1].startswith("best epoch 1 of 1")
    assert "{" not in plain.strip().splitlines()[-1] and " a epoch" not in plain
    asked = train("fit", colours / "wds", "--out", tmp_path / "b", "--epochs", "1", "--json",
                  *FIT_OPTIONS)
    assert json.loads(asked.strip().splitlines()[-1])["epochs_run"] == 1


def test_resume_from_another_models_checkpoint_names_what_differs(colours, tmp_path):
    out = tmp_path / "run"
    train("fit", colours / "wds", "--out", out, "--epochs", "1", "--width", "8", *FIT_OPTIONS)
    refused = train("fit", colours / "wds", "--out", out, "--epochs", "2", "--width", "16",
                    "--resume", *FIT_OPTIONS, expect=1)
    assert "written for another model" in refused and "--width 8 then, 16 now" in refused


def test_a_table_of_two_regression_targets_trains_and_reports_each(tmp_path):
    rng = np.random.default_rng(0)
    features = rng.normal(0, 1, (240, 3))
    targets = np.stack([features @ [1, 2, 0], features @ [0, -1, 3]], axis=1)
    rows = ["a,b,c,y1,y2"] + [",".join(f"{v:.5f}" for v in (*f, *t))
                              for f, t in zip(features, targets, strict=True)]
    (tmp_path / "two.csv").write_text("\n".join(rows) + "\n")
    packer_run("pack", tmp_path / "two.csv", "--label-column", "y1,y2", "--task", "regress",
               "--to", "hdf5", "-o", tmp_path / "two.h5", "-q")
    output = train("fit", tmp_path / "two.h5", "--out", tmp_path / "run", "--epochs", "3",
                   "--workers", "0")
    assert "val mae per target" in output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert len(summary["best"]["val"]["mae_per_target"]) == 2


def test_options_that_would_do_nothing_are_refused_with_why(colours, tmp_path):
    wds = colours / "wds"
    for args, said in ((["--loss", "l1"], "--loss l1 is a regression loss"),
                       (["--scale-lr"], "--scale-lr scales the learning rate you give")):
        refused = train("fit", wds, "--out", tmp_path / "r", "--epochs", "1", "--image-size",
                        "16", "--workers", "0", *args, expect=1)
        assert said in refused
    rows = "a,y\n" + "".join(f"{i},{i * 0.5}\n" for i in range(40))
    (tmp_path / "r.csv").write_text(rows)
    packer_run("pack", tmp_path / "r.csv", "--label-column", "y", "--task", "regress", "--to",
               "hdf5", "-o", tmp_path / "r.h5", "-q")
    for args, said in ((["--loss", "focal"], "--loss focal weighs the classes"),
                       (["--class-weights", "auto"], "--class-weights weighs the classes")):
        refused = train("fit", tmp_path / "r.h5", "--out", tmp_path / "r2", "--epochs", "1",
                        "--workers", "0", *args, expect=1)
        assert said in refused and "regression task" in refused


def test_overfit_on_photos_is_bounded_for_a_cpu(tmp_path):
    """128 photos of 200x150 were one batch of 128 at full size for 300 steps (15 minutes
    on a CPU); the check reads them at 32 px in batches of 32, within its step bound."""
    from conftest import class_images
    from train.config import TrainConfig
    from train.probes import overfit

    class_images(tmp_path / "photos", 2, 64, size=lambda i: (200, 150))
    packer_run("pack", tmp_path / "photos", "-o", tmp_path / "wds", "-q")
    result = overfit(TrainConfig(data=str(tmp_path / "wds"), val_split=0.0, workers=0), 128)
    assert result["image_size"] == 32 and result["batch_size"] == 32
    assert result["samples"] == 128 and result["steps"] <= 200


def test_overfit_keeps_square_images_already_small(colours):
    """Images of 16 px a side give an image size of one int; the check once failed on it
    with 'int object is not iterable'."""
    result = CliRunner().invoke(cli, ["overfit", str(colours / "wds"), "--samples", "16",
                                      "--workers", "0"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "overfit: loss" in result.output


def test_a_range_test_that_sees_no_fall_suggests_the_usual_rate():
    """On 135 digits in batches of 8 the smoothed loss only wandered around 2.3 before it
    diverged; its lowest point, at 1.3e-4, gave 1.3e-5, at which nothing was learnt."""
    from train.lr_range import suggest, why

    rates = [1e-5 * 10 ** (i / 12) for i in range(60)]
    flat = [2.30 + 0.02 * ((i * 7) % 5 - 2) for i in range(59)] + [9.5]
    flat[12] = 2.25
    result = {"lrs": rates, **suggest(rates, flat, "adamw")}
    assert result["suggested_lr"] == 1e-3 and not result["descended"]
    assert "less than 10%" in why(result) and "adamw's usual rate" in why(result)
    assert suggest(rates, flat, "sgd")["suggested_lr"] == 1e-2
    falling = [2.3 - 0.03 * i for i in range(50)] + [9.0] * 10  # lowest at step 49
    picked = suggest(rates, falling, "adamw")
    assert picked["descended"] and picked["suggested_lr"] == pytest.approx(rates[49] / 10)
