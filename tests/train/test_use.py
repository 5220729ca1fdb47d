"""Using a trained run: train evaluate, train predict, train export."""

import csv
import json
import shutil

import numpy as np
import pytest
import torch

from conftest import colour_images
from conftest import run as packer_run
from train import trained as trained_run
from train_cli import train

CLASSES = ["c0", "c1", "c2"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A small timm model fine-tuned for two epochs, and the data it was trained on."""
    root = tmp_path_factory.mktemp("use")
    colour_images(root / "images", [(220, 40, 40), (40, 200, 40), (40, 40, 220)],
                  per_class=10, spread=60)
    packer_run("pack", root / "images", "-o", root / "wds", "-q")
    start = root / "start.pt"
    import timm

    torch.save(timm.create_model("mobilenetv3_small_050").state_dict(), start)
    train("fit", root / "wds", "--out", root / "run", "--model", "timm:mobilenetv3_small_050",
          "--weights", start, "--epochs", "2", "--image-size", "32", "--batch-size", "8",
          "--workers", "0", "--lr", "1e-3")
    return root


def rows(path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as file:
        return list(csv.DictReader(file))


def test_evaluate_writes_metrics_as_json_csv_and_png(run, tmp_path):
    output = train("evaluate", run / "run", run / "wds", "--out", tmp_path, "--workers", "0")
    result = json.loads((tmp_path / "evaluation.json").read_text())
    assert result["samples"] == 30 and 0 <= result["accuracy"] <= 1
    assert f"30 samples: accuracy {result['accuracy']:.4f}" in output
    assert "confusion (rows: true class, columns: predicted):" in output
    per_class = rows(tmp_path / "per_class.csv")
    assert [r["class"] for r in per_class] == CLASSES and all(r["samples"] == "10"
                                                              for r in per_class)
    assert (tmp_path / "confusion.png").stat().st_size > 0
    confusion = list(csv.reader(open(tmp_path / "confusion.csv", encoding="utf-8")))
    assert confusion[0] == ["true \\ predicted", *CLASSES]
    assert sum(int(n) for row in confusion[1:] for n in row[1:]) == 30


def test_predict_on_a_folder_gives_the_classes_evaluate_counts(run, tmp_path):
    train("predict", run / "run", run / "images", "-o", tmp_path / "folder.csv", "--top-k",
          "2", "--workers", "0")
    train("predict", run / "run", run / "wds", "-o", tmp_path / "packed.csv", "--workers", "0")
    folder, packed = rows(tmp_path / "folder.csv"), rows(tmp_path / "packed.csv")
    assert list(folder[0]) == ["input", "class_1", "prob_1", "class_2", "prob_2"]
    assert len(folder) == len(packed) == 30
    by_key = {r["input"]: r["class_1"] for r in packed}  # keys: c0/0 ...
    for row in folder:
        key = row["input"].split("images/", 1)[1].rsplit(".", 1)[0]
        assert row["class_1"] == by_key[key], key
        assert float(row["prob_1"]) >= float(row["prob_2"])
    result = json.loads(train("evaluate", run / "run", run / "wds", "--json", "--workers", "0"))
    predicted = [sum(column) for column in zip(*result["confusion"], strict=True)]
    assert predicted == [sum(r["class_1"] == c for r in folder) for c in CLASSES]


def test_predict_single_files_uses_the_run_preprocessing(run, tmp_path):
    image = run / "images" / "c1" / "3.jpg"
    train("predict", run / "run", image, "-o", tmp_path / "one.csv", "--workers", "0")
    [row] = rows(tmp_path / "one.csv")
    loaded = trained_run.load(str(run / "run"))
    assert loaded.image_size == (32, 32)
    sample = trained_run.ImageFiles([(str(image), -1)], (32, 32))[0]
    from train.inputs import to_inputs

    inputs = to_inputs({"jpg": sample["jpg"][None]}, trained_run.files_info(loaded.info),
                       torch.device("cpu"))
    probs = trained_run.outputs_of(loaded, inputs)
    assert row["class_1"] == CLASSES[int(probs.argmax())]
    assert float(row["prob_1"]) == pytest.approx(probs.max().item(), abs=1e-6)


def test_export_onnx_runs_in_onnxruntime_as_in_pytorch(run, tmp_path):
    import onnxruntime

    output = train("export", run / "run", "--format", "onnx", "-o", tmp_path / "m.onnx")
    assert f"onnx model written to {tmp_path / 'm.onnx'}" in output
    recipe = json.loads((tmp_path / "m.preprocess.json").read_text())
    assert recipe["classes"] == CLASSES and recipe["size"] == [32, 32]
    assert recipe["mean"] == [0.485, 0.456, 0.406]
    inputs = torch.randn(5, 3, 32, 32)
    session = onnxruntime.InferenceSession(str(tmp_path / "m.onnx"))
    exported = session.run(None, {"input": inputs.numpy()})[0]
    model = trained_run.load(str(run / "run")).model
    with torch.no_grad():
        expected = model(inputs).numpy()
    assert np.allclose(exported, expected, atol=1e-4)


def test_export_torchscript_loads_without_the_toolkit(run, tmp_path):
    train("export", run / "run", "--format", "torchscript", "-o", tmp_path / "m.pt")
    scripted = torch.jit.load(str(tmp_path / "m.pt"))
    inputs = torch.randn(2, 3, 32, 32)
    model = trained_run.load(str(run / "run")).model
    with torch.no_grad():
        assert torch.allclose(scripted(inputs), model(inputs), atol=1e-5)


def test_evaluate_a_regression_gives_mae_and_rmse(tmp_path):
    rng = np.random.default_rng(1)
    features = rng.normal(size=(200, 3))
    target = features @ [1.5, -2.0, 0.5]
    lines = ["a,b,c,y"] + [",".join(f"{v:.6f}" for v in (*x, t))
                           for x, t in zip(features, target, strict=True)]
    (tmp_path / "reg.csv").write_text("\n".join(lines) + "\n")
    packer_run("pack", tmp_path / "reg.csv", "--to", "hdf5", "--label-column", "y", "--task",
               "regress", "-o", tmp_path / "reg.h5", "-q")
    train("fit", tmp_path / "reg.h5", "--out", tmp_path / "run", "--epochs", "2", "--workers",
          "0", "--lr", "3e-3", "--batch-size", "32")
    output = train("evaluate", tmp_path / "run", tmp_path / "reg.h5", "--workers", "0")
    result = json.loads((tmp_path / "run" / "evaluate" / "evaluation.json").read_text())
    assert f"200 samples: MAE {result['mae']:.4f}, RMSE {result['rmse']:.4f}" in output
    assert result["rmse"] >= result["mae"] > 0


def test_evaluate_maps_classes_by_name_and_refuses_unknown_ones(run, tmp_path):
    shutil.copytree(run / "images" / "c2", tmp_path / "only" / "c2")
    result = json.loads(train("evaluate", run / "run", tmp_path / "only", "--json",
                              "--workers", "0"))
    assert sum(result["confusion"][2]) == 10 and sum(map(sum, result["confusion"])) == 10
    shutil.copytree(run / "images" / "c1", tmp_path / "other" / "dog")
    output = train("evaluate", run / "run", tmp_path / "other", "--workers", "0", expect=1)
    assert "classes the run was not trained on: dog (the run's classes: c0, c1, c2)" in output


def test_a_checkpoint_without_its_input_record_is_one_message(run, tmp_path):
    state = torch.load(run / "run" / "best.pt", weights_only=True)
    del state["data"]
    torch.save(state, tmp_path / "old.pt")
    output = train("predict", tmp_path / "old.pt", run / "images", "-o", tmp_path / "p.csv",
                   expect=1)
    assert "did not record the model's input" in output and "Traceback" not in output


def test_predict_names_what_is_not_an_image(run, tmp_path):
    (tmp_path / "notes.txt").write_text("not an image")
    output = train("predict", run / "run", tmp_path / "notes.txt", "-o", tmp_path / "p.csv",
                   expect=1)
    assert f"{tmp_path / 'notes.txt'}: not an image file" in output
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 cut short")
    output = train("predict", run / "run", tmp_path / "broken.jpg", "-o", tmp_path / "p.csv",
                   expect=1)
    assert f"{tmp_path / 'broken.jpg'}: not an image that can be decoded" in output
    assert "Traceback" not in output


def test_a_class_without_samples_says_so_rather_than_scoring_zero(run, tmp_path):
    """A class the evaluated data lacks showed F1 0.0, a score it never earned."""
    for name in ("c0", "c1"):
        shutil.copytree(run / "images" / name, tmp_path / "two" / name)
    output = train("evaluate", run / "run", tmp_path / "two", "--out", tmp_path / "ev",
                   "--workers", "0")
    result = json.loads((tmp_path / "ev" / "evaluation.json").read_text())
    assert result["per_class"]["c2"] == {"precision": result["per_class"]["c2"]["precision"],
                                         "recall": None, "f1": None, "samples": 0}
    assert result["per_class"]["c0"]["samples"] == 10
    assert "c2     no samples" in output or "c2  no samples" in output
    assert rows(tmp_path / "ev" / "per_class.csv")[2] == {
        "class": "c2", "precision": "", "recall": "", "f1": "", "samples": "0"}
