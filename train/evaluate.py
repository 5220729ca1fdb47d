"""`train evaluate RUN DATA`: a trained run's metrics on a packed dataset or a folder of
class sub-folders: accuracy, per-class precision, recall and F1 and the confusion
matrix (regression: MAE and RMSE), written as JSON, CSV and a PNG."""

import csv
import json
from dataclasses import replace
from pathlib import Path

import torch
from tqdm import tqdm

import packer
from packer.errors import PackerError
from train import plots
from train.data import AsTraining, describe, part_cache
from train.inputs import to_inputs, to_targets
from train.losses import loss_function
from train.metrics import Metrics, strict_json
from train.trained import ImageFiles, Trained, files_info

NO_LABELS = -1


def evaluate(trained: Trained, data: str, out: Path, batch_size: int = 64,
             workers: int = 0, split: str | None = None) -> dict:
    """The metrics of `trained` on `data` (only its pack-time `split`, if given); writes
    OUT/evaluation.json, and for classification OUT/per_class.csv, OUT/confusion.csv and
    OUT/confusion.png."""
    dataset, info = _dataset(trained, data, split)
    loader = packer.DataLoader(dataset, batch_size=batch_size, num_workers=workers)
    config = replace(trained.config, class_weights=None, label_smoothing=0.0)
    loss_fn = loss_function(info.task, None, config)
    metrics = Metrics(info.task, info.classes, trained.device)
    with torch.no_grad():
        for batch in tqdm(loader, desc="evaluate", leave=False, disable=None):
            inputs = to_inputs(batch, info, trained.device)
            targets = to_targets(batch, info, trained.device)
            outputs = trained.model(inputs).float()
            outputs = outputs.squeeze(1) if info.task == "regress" else outputs
            metrics.update(loss_fn(outputs, targets),
                           outputs.unsqueeze(1) if outputs.ndim == 1 else outputs, targets)
    result = {"run": str(trained.path), "data": data, "split": split, **metrics.result()}
    _write(result, info.classes, out)
    return result


def _dataset(trained: Trained, data: str, split: str | None):
    """DATA's samples in the run's terms (its image size, field names and class ids,
    matched by class name), and the description its batches are read with."""
    info = trained.info
    arrays = None if info.decoded_images else ",".join(info.inputs)
    size = trained.image_size
    theirs = describe(replace(trained.config, data=data, val=None, val_split=0.0,
                              inputs=arrays, num_classes=None,
                              image_size=size[0] if size and size[0] == size[1] else size),
                      training=False)
    labels = _labels(info.classes, theirs.classes, data) if info.task == "classify" else None
    if theirs.files is not None:
        if split:
            raise PackerError(f"--split {split}: {data} is a folder of files, which has no "
                              "splits; pack it with packer pack --split")
        files = [(path, labels[label] if labels else label) for path, label in theirs.files]
        return ImageFiles(files, size), files_info(info)
    keys = tuple((a, b) for a, b in zip(theirs.inputs, info.inputs, strict=True) if a != b)
    mapping = AsTraining(labels, keys) if labels or keys else None
    return packer.open_dataset(data, decode="rgb8" if info.decoded_images else "raw",
                               image_size=size, transform=info.keep(mapping), split=split,
                               **part_cache(trained.config)), info


def _labels(ours: list[str], theirs: list[str] | None, data: str) -> tuple[int, ...] | None:
    """DATA's class id -> the run's (None: the same classes)."""
    if theirs == ours:
        return None
    unknown = [name for name in theirs or [] if name not in ours]
    if unknown or not theirs:
        raise PackerError(f"{data}: classes the run was not trained on: "
                          f"{', '.join(unknown) or 'none named'} (the run's classes: "
                          f"{', '.join(ours)})")
    return tuple(ours.index(name) for name in theirs)


def _write(result: dict, classes: list[str] | None, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "evaluation.json").write_text(json.dumps(strict_json(result), indent=1,
                                                    allow_nan=False))
    if "per_label" in result:
        _write_per_label(result["per_label"], out / "per_label.csv")
    if "per_class" not in result:
        return
    counts = result["confusion"]
    with open(out / "per_class.csv", "w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(["class", "precision", "recall", "f1", "samples"])
        for index, (name, scores) in enumerate(result["per_class"].items()):
            if scores["recall"] is None:
                writer.writerow([name, "", "", "", 0])  # no samples: no recall, no F1
                continue
            writer.writerow([name, f"{scores['precision']:.4f}", f"{scores['recall']:.4f}",
                             f"{scores['f1']:.4f}", sum(counts[index])])
    with open(out / "confusion.csv", "w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(["true \\ predicted", *classes])
        writer.writerows([name, *row] for name, row in zip(classes, counts, strict=True))
    plots.confusion(counts, classes, out / "confusion.png", None,
                    f"{result['data']}: accuracy {result['accuracy']:.3f}")


def _write_per_label(per_label: dict, path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(["label", "precision", "recall", "f1", "ap", "samples"])
        for name, s in per_label.items():
            scores = [s["precision"], s["recall"], s["f1"], s["ap"]]
            writer.writerow([name, *("" if v is None else f"{v:.4f}" for v in scores),
                             s["samples"]])


def _label_lines(result: dict) -> list[str]:
    """Multi-label: mAP, then per label precision, recall, F1 and AP."""
    per_label = result["per_label"]
    width = max(len(name) for name in per_label)
    shown = "no positive sample" if result["map"] is None else f"{result['map']:.4f}"
    lines = [f"mAP {shown}", f"{'label':<{width}}  precision  recall     f1     AP"]
    lines += [f"{name:<{width}}  no samples" if s["recall"] is None else
              f"{name:<{width}}  {s['precision']:9.3f}  {s['recall']:6.3f}  {s['f1']:5.3f}  "
              f"{s['ap']:5.3f}" for name, s in per_label.items()]
    return lines


def summary(result: dict, classes: list[str] | None) -> str:
    """What a person reads: the headline figures, per-class scores, the confusion."""
    if "mae" in result:
        return (f"{result['samples']:,} samples: MAE {result['mae']:.4f}, RMSE "
                f"{result['rmse']:.4f}, loss {result['loss']:.4f}")
    lines = [f"{result['samples']:,} samples: accuracy {result['accuracy']:.4f}"]
    if "per_label" in result:
        return "\n".join(lines + _label_lines(result))
    if "per_class" not in result:
        return lines[0]
    width = max(len(name) for name in classes)
    lines.append(f"{'class':<{width}}  precision  recall     f1")
    lines += [f"{name:<{width}}  no samples" if s["recall"] is None else
              f"{name:<{width}}  {s['precision']:9.3f}  {s['recall']:6.3f}  {s['f1']:5.3f}"
              for name, s in result["per_class"].items()]
    if len(classes) <= 20:
        lines.append("confusion (rows: true class, columns: predicted):")
        lines += [f"{name:<{width}}  " + " ".join(f"{n:5d}" for n in row)
                  for name, row in zip(classes, result["confusion"], strict=True)]
    return "\n".join(lines)
