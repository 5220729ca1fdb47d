"""Unpacking: a packed dataset back to a folder in the layout it came from. Images
re-encoded when packed (--resize, --encode) are written as stored, with the extension
of their stored field (`a.png` packed with --encode jpeg comes back as `a.jpg`, raw
pixels as `a.rgb.npy`), and the result says so."""

import csv
import json
import shutil
from pathlib import Path, PurePosixPath

from tqdm import tqdm

from packer.errors import DatasetError, UsageProblem
from packer.manifest import partial_path
from packer.packing.transform import reencoded_text
from packer.read.dataset import iter_samples, label_field, open_packed
from packer.sample import KEY, field_bytes, restored_path

MARKER_NAME = ".packer-unpack.json"  # written into every unpack output


def _safe_relative(path: str, key: str) -> str:
    parts = PurePosixPath(path).parts
    if not parts or path.startswith("/") or ".." in parts:
        raise DatasetError(f"sample {key!r}: its path {path!r} would leave the output folder")
    return path


def _labels_file_name(manifest: dict) -> str:
    """Where the labels go: the labels file's own place in a packed folder, else
    `labels.csv`."""
    source = manifest["source"]
    if source.get("labels_file"):
        labels_file, root = Path(source["labels_file"]).resolve(), Path(source["path"])
        if labels_file.is_relative_to(root):
            return labels_file.relative_to(root).as_posix()
    return "labels.csv"


def _free_name(folder: Path, name: str) -> str:
    """`name`, or `STEM-2.SUFFIX`, ... when an unpacked file already has it."""
    path, number = PurePosixPath(name), 1
    while (folder / name).exists():
        number += 1
        name = str(path.with_name(f"{path.stem}-{number}{path.suffix}"))
    return name


def _check_output(dataset: Path, out: Path, overwrite: bool) -> None:
    if Path(dataset).resolve().is_relative_to(out.resolve()):
        raise UsageProblem(f"-o {out} contains the dataset {dataset}; choose another output")
    if out.resolve().is_relative_to(Path(dataset).resolve()):
        raise UsageProblem(f"-o {out} is inside the dataset {dataset}; unpacking there would "
                           "mix files into it: choose an output outside it")
    if out.exists() and not out.is_dir():
        raise UsageProblem(f"-o {out} is a file; choose a folder")
    if not out.exists() or not any(out.iterdir()):
        return
    if not overwrite:
        raise UsageProblem(f"{out} exists and is not empty; pass --overwrite to replace it")
    if not (out / MARKER_NAME).is_file():
        raise UsageProblem(f"{out} exists and was not written by `packer unpack`; refusing "
                           "to replace it, choose another -o")


def _write_samples(dataset: Path, manifest: dict, work: Path, progress: bool) -> tuple:
    """Every sample's files under `work`; returns (files, bytes, labels rows)."""
    label = label_field(manifest)
    classes = manifest.get("classes") or []
    with_labels = manifest["source"]["labels"] != "folders"
    made_dirs, label_rows, files, written = {work}, [], 0, 0
    for sample in tqdm(iter_samples(dataset), total=manifest["count"], unit="sample",
                       disable=not progress, desc="unpacking"):
        paths = []
        for field, value in sample.items():
            if field in (KEY, label):
                continue
            rel = _safe_relative(restored_path(sample[KEY], field), sample[KEY])
            target = work / rel
            if target.parent not in made_dirs:
                target.parent.mkdir(parents=True, exist_ok=True)
                made_dirs.add(target.parent)
            data = value if type(value) is bytes else field_bytes(value)
            target.write_bytes(data)
            paths.append(rel)
            files, written = files + 1, written + len(data)
        if with_labels and label in sample and paths:
            label_rows.append((paths[0], classes[sample[label]] if classes else sample[label]))
    return files, written, label_rows


def unpack(dataset: Path, out: Path, *, overwrite: bool = False, progress: bool = True) -> dict:
    """Write every sample's files to `out`, and the labels that no path carries to a
    labels file; returns counts."""
    manifest, _ = open_packed(dataset)
    _check_output(dataset, out, overwrite)
    work = partial_path(out)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        files, written, label_rows = _write_samples(dataset, manifest, work, progress)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    labels_file = None
    if label_rows:
        labels_file = _free_name(work, _labels_file_name(manifest))
        with open(work / labels_file, "w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerows([("filename", "label"), *label_rows])
    (work / MARKER_NAME).write_text(json.dumps({"dataset": str(Path(dataset).resolve())}))
    if out.exists():
        shutil.rmtree(out)
    work.rename(out)
    return {"output": str(out), "samples": manifest["count"], "files": files, "bytes": written,
            "labels_file": labels_file, "reencoded": reencoded_text(manifest)}
