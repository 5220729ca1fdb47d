"""`train predict RUN INPUT... -o predictions.csv`: one row per input (a packed
dataset's samples, a folder's images, or image files) with the top-k classes and
their probabilities (regression: the predicted values), prepared with the run's own
preprocessing."""

import csv
from pathlib import Path

import torch
from tqdm import tqdm

import packer
from packer import IMAGE_FIELDS, MANIFEST_NAME
from packer.errors import PackerError
from train.cache import KEY
from train.data import Keep, part_cache
from train.inputs import to_inputs
from train.trained import ImageFiles, Trained, files_info, outputs_of


def predict(trained: Trained, inputs: list[str], out: Path, top_k: int = 5,
            batch_size: int = 64, workers: int = 0) -> int:
    """Write OUT (CSV); returns the number of rows."""
    dataset, info = _dataset(trained, inputs)
    loader = packer.DataLoader(dataset, batch_size=batch_size, num_workers=workers)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = 0
    with open(out, "w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(_header(trained, top_k))
        for batch in tqdm(loader, desc="predict", leave=False, disable=None):
            values = outputs_of(trained, to_inputs(batch, info, trained.device))
            for key, row in zip(batch[KEY], values, strict=True):
                writer.writerow([key, *_cells(trained, row, top_k)])
                rows += 1
    return rows


def _header(trained: Trained, top_k: int) -> list[str]:
    if trained.info.task == "regress":
        return ["input", *(f"value_{i + 1}" for i in range(trained.info.targets))]
    shown = min(top_k, len(trained.info.classes))
    return ["input", *(f"{part}_{i + 1}" for i in range(shown) for part in ("class", "prob"))]


def _cells(trained: Trained, row: torch.Tensor, top_k: int) -> list:
    if trained.info.task == "regress":
        return [f"{value:.6g}" for value in row.reshape(-1).tolist()]
    probs, ids = row.topk(min(top_k, row.numel()))
    return [cell for p, i in zip(probs.tolist(), ids.tolist(), strict=True)
            for cell in (trained.info.classes[i], f"{p:.6f}")]


def _dataset(trained: Trained, inputs: list[str]):
    """A packed dataset (one path holding a manifest), else image files and folders;
    and the description its batches are read with."""
    info = trained.info
    if len(inputs) == 1 and (Path(inputs[0]) / MANIFEST_NAME).is_file() or \
            inputs[0].startswith("s3://"):
        keep = Keep((KEY, *info.inputs))
        return packer.open_dataset(inputs[0], decode="rgb8" if info.decoded_images else "raw",
                                   image_size=trained.image_size, transform=keep,
                                   **part_cache(trained.config)), info
    if not info.decoded_images:
        raise PackerError(f"the run takes {info.kind} data ({', '.join(info.inputs)}), so "
                          "predict reads it from a packed dataset, not from files")
    files = [(path, -1) for path in _image_files(inputs)]
    return ImageFiles(files, trained.image_size), files_info(info)


def _image_files(inputs: list[str]) -> list[str]:
    """The images among INPUT (folders searched through, in sorted order)."""
    found = []
    for name in inputs:
        path = Path(name)
        if path.is_dir():
            found += sorted(str(p) for p in path.rglob("*") if p.is_file()
                            and p.suffix[1:].lower() in IMAGE_FIELDS)
        elif path.is_file() and path.suffix[1:].lower() in IMAGE_FIELDS:
            found.append(str(path))
        elif path.is_file():
            raise PackerError(f"{name}: not an image file (extensions: "
                              f"{', '.join(sorted(IMAGE_FIELDS))})")
        else:
            raise PackerError(f"{name}: no such file or folder")
    if not found:
        raise PackerError(f"{', '.join(inputs)}: no image files there (extensions: "
                          f"{', '.join(sorted(IMAGE_FIELDS))})")
    return found
