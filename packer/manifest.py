"""The manifest: `manifest.json` beside the data (or, in a dataset that is one file,
where its format keeps it), the one description readers trust.

It holds the format and layout version, the sample count, the fields (dtype,
count, bytes), class names in id order with their counts, the parts (shards or
blocks) with counts, sizes and digests, the source, the options used, the tool
version, and `skipped`: every input that was not packed, with the reason.
"""

import json
import os
from pathlib import Path

from packer.errors import DatasetError, NoSuchDataset
from packer.sample import LAYOUT_VERSION

MANIFEST_NAME = "manifest.json"
PARTIAL_SUFFIX = ".partial"


def partial_path(out: Path) -> Path:
    """Where a pack into `out` is written until it is complete."""
    return out.with_name(out.name + PARTIAL_SUFFIX)


def write_json_atomic(path: Path, data: dict, sync: bool = True) -> None:
    """Replace `path` with `data` in one step. `sync=False` leaves out the fsync: for
    a record that need only survive the process (killed or crashed), not the machine,
    written many times in a run (progress.json; the parts it lists are not synced
    either)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as file:
        json.dump(data, file, indent=1, ensure_ascii=False)
        if sync:
            file.flush()
            os.fsync(file.fileno())
    os.replace(tmp, path)


def load_manifest(dataset: Path) -> dict:
    """The manifest of a packed dataset, or a DatasetError that says what is wrong."""
    dataset = Path(dataset)
    if dataset.name.endswith(PARTIAL_SUFFIX) or (
        not dataset.exists() and partial_path(dataset).exists()
    ):
        raise DatasetError(f"{dataset}: an unfinished pack (the run was interrupted or "
                           "failed); finish it with `packer pack ... --resume`")
    if not dataset.exists():
        raise NoSuchDataset(f"{dataset}: no such packed dataset")
    manifest = _file_manifest(dataset) if dataset.is_file() else _folder_manifest(dataset)
    if manifest.get("layout_version", 1) > LAYOUT_VERSION:
        raise DatasetError(f"{dataset}: written by {manifest.get('tool', 'a newer packer')} "
                           f"in layout {manifest['layout_version']}, which this packer "
                           f"(layout {LAYOUT_VERSION}) cannot read; upgrade packer")
    return manifest


def _folder_manifest(dataset: Path) -> dict:
    path = dataset / MANIFEST_NAME
    if not path.is_file():
        raise DatasetError(f"{dataset}: not a packed dataset (no {MANIFEST_NAME}); "
                           "make one with `packer pack`")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise DatasetError(f"{path}: cannot read the manifest: {err}") from None


def _file_manifest(dataset: Path) -> dict:
    from packer.formats import manifest_of_file  # the formats, only for a one-file dataset

    manifest = manifest_of_file(dataset)
    if manifest is None:
        raise DatasetError(f"{dataset}: a file, but not a packed dataset (no format "
                           "finds its manifest in it); make one with `packer pack`")
    return manifest


def is_packed(path: Path) -> bool:
    """Whether `path` is a packed dataset: a folder with a manifest, or one file with
    its manifest inside."""
    path = Path(path)
    if path.is_dir():
        return (path / MANIFEST_NAME).is_file()
    from packer.formats import manifest_of_file

    try:
        return path.is_file() and manifest_of_file(path) is not None
    except DatasetError:
        return False


def class_counts(manifest: dict) -> dict[str, int]:
    return dict(zip(manifest.get("classes") or [], manifest.get("class_counts") or [],
                    strict=True))
