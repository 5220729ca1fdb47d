"""Unpacking: a packed dataset back to a folder in the layout it came from."""

import csv
import shutil
from pathlib import Path, PurePosixPath

from tqdm import tqdm

from packer.dataset import iter_samples, label_field, open_packed
from packer.errors import DatasetError, UsageProblem
from packer.formats.base import KEY
from packer.keys import restored_path
from packer.manifest import partial_path


def _safe_relative(path: str, key: str) -> str:
    parts = PurePosixPath(path).parts
    if not parts or path.startswith("/") or ".." in parts:
        raise DatasetError(f"sample {key!r}: its path {path!r} would leave the output folder")
    return path


def _labels_file_name(manifest: dict) -> str:
    labels_file = Path(manifest["source"]["labels_file"])
    root = Path(manifest["source"]["path"])
    if labels_file.resolve().is_relative_to(root):
        return labels_file.resolve().relative_to(root).as_posix()
    return "labels.csv"


def unpack(dataset: Path, out: Path, *, overwrite: bool = False, progress: bool = True) -> dict:
    """Write every sample's files to `out`; returns counts."""
    manifest, _ = open_packed(dataset)
    if Path(dataset).resolve().is_relative_to(out.resolve()):
        raise UsageProblem(f"-o {out} contains the dataset {dataset}; choose another output")
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise UsageProblem(f"{out} exists and is not empty; pass --overwrite to replace it")
    work = partial_path(out)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    label = label_field(manifest)
    classes = manifest.get("classes") or []
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
            target.write_bytes(value)
            paths.append(rel)
            files, written = files + 1, written + len(value)
        if label and manifest["source"]["labels"] == "labels-file":
            label_rows.append((paths[0], classes[sample[label]]))
    if label_rows:
        with open(work / _labels_file_name(manifest), "w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerows([("filename", "label"), *label_rows])
    if out.exists():
        shutil.rmtree(out)
    work.rename(out)
    return {"output": str(out), "samples": manifest["count"], "files": files, "bytes": written}
