"""The manifest: `manifest.json` beside the data (or, in a dataset that is one file,
where its format keeps it), the one description readers trust. This module is the file
itself: its names, its atomic write and its seal (a digest of itself); finding and
checking the manifest of a dataset is packer.formats.manifests (local) and
packer.read.dataset.load_manifest (local or s3://).

It holds the format and layout version, the sample count, the fields (dtype,
count, bytes), class names in id order with their counts, the parts (shards or
blocks) with counts, sizes and digests, the source, the options used, the tool
version, and `skipped`: every input that was not packed, with the reason.
"""

import hashlib
import json
import os
from pathlib import Path

from packer.errors import DatasetError

MANIFEST_NAME = "manifest.json"
PARTIAL_SUFFIX = ".partial"
SCHEMA_FILE = "manifest.schema.json"  # in packer/schemas/, for other tools too
DIGEST_KEY = "manifest_sha256"  # the sha256 of the rest of the manifest, as written
UNFINISHED = MANIFEST_NAME + PARTIAL_SUFFIX  # beside a bucket's parts until the manifest is there


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


def seal(manifest: dict) -> None:
    """Record the manifest's own digest in it, as the last step of a pack."""
    manifest[DIGEST_KEY] = _digest(manifest)


def digest_matches(manifest) -> bool:
    """Whether `manifest` records its own digest and is as it was sealed."""
    return (isinstance(manifest, dict) and isinstance(manifest.get(DIGEST_KEY), str)
            and manifest[DIGEST_KEY] == _digest(manifest))


def _digest(manifest: dict) -> str:
    body = {key: value for key, value in manifest.items() if key != DIGEST_KEY}
    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode(
        "utf-8", "surrogatepass")).hexdigest()


def layout_label(manifest: dict) -> str | None:
    """The field that holds a label given by the source's layout (a class folder, a
    labels file, a label column), not by a file of the source; None when unlabelled."""
    return "cls" if manifest["source"].get("labels", "none") != "none" else None


def class_counts(manifest: dict) -> dict[str, int]:
    return dict(zip(manifest.get("classes") or [], manifest.get("class_counts") or [],
                    strict=True))


def split_ranges(manifest: dict | None, name: str, path) -> list[list[int]]:
    """The [first, stop) sample index ranges of the split `name` that the pack made (the
    manifest's `splits`), or a DatasetError naming the splits there are."""
    splits = (manifest or {}).get("splits")
    if not splits:
        made = "plain shards, with no manifest" if manifest is None else "packed without splits"
        raise DatasetError(f"{path}: split {name!r} asked for, but the dataset is {made}; "
                           "`packer pack --split train=0.8,val=0.1,test=0.1` makes them")
    if name not in splits["sets"]:
        raise DatasetError(f"{path}: no split {name!r}; its splits are "
                           f"{', '.join(map(repr, splits['sets']))}")
    return splits["sets"][name]["ranges"]
