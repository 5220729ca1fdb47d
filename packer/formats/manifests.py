"""Finding and checking the manifest of a dataset on local disk: `manifest.json` in a
folder, or the manifest that a one-file format keeps inside its file; checked against
packer's JSON Schema (packer/schemas/manifest.schema.json) and against the format's own
rules (its parts follow one another, add up to the count, and carry their keys)."""

import json
from functools import cache
from importlib import resources
from pathlib import Path

from packer import formats
from packer.errors import DatasetError, NoSuchDataset
from packer.formats import manifest_of_file
from packer.manifest import (
    MANIFEST_NAME,
    PARTIAL_SUFFIX,
    SCHEMA_FILE,
    digest_matches,
    partial_path,
)
from packer.sample import LAYOUT_VERSION


def local_manifest(dataset) -> dict:
    """The checked manifest of a packed dataset on local disk (a folder, or a dataset
    that is one file), or a DatasetError that says what is wrong."""
    dataset = Path(dataset)
    if dataset.name.endswith(PARTIAL_SUFFIX) or (
        not dataset.exists() and partial_path(dataset).exists()
    ):
        raise DatasetError(f"{dataset}: an unfinished pack (the run was interrupted or "
                           "failed); finish it with `packer pack ... --resume`")
    if not dataset.exists():
        raise NoSuchDataset(f"{dataset}: no such packed dataset")
    manifest = _file_manifest(dataset) if dataset.is_file() else _folder_manifest(dataset)
    check_manifest(manifest, dataset if dataset.is_file() else dataset / MANIFEST_NAME)
    if manifest.get("layout_version", 1) > LAYOUT_VERSION:
        raise DatasetError(f"{dataset}: written by {manifest.get('tool', 'a newer packer')} "
                           f"in layout {manifest['layout_version']}, which this packer "
                           f"(layout {LAYOUT_VERSION}) cannot read; upgrade packer")
    return manifest


@cache
def _validator():
    import jsonschema  # here, so that packing, which writes manifests, never loads it

    schema = json.loads(resources.files("packer").joinpath("schemas", SCHEMA_FILE).read_text())
    return jsonschema.Draft202012Validator(schema)


def check_manifest(manifest, path: Path) -> None:
    """A DatasetError naming the first problem when `manifest` does not match the
    schema, or its counts do not add up. A manifest whose digest says it is as packer
    wrote it is spared the schema (importing jsonschema costs a tenth of a second, as
    much as reading a small dataset); any edit or damage changes the digest."""
    if digest_matches(manifest):
        return
    from jsonschema.exceptions import best_match

    error = best_match(_validator().iter_errors(manifest))
    if error is not None:
        where = "".join(f"[{p!r}]" for p in error.absolute_path) or "the top level"
        problem = f"at {where}: {error.message}"
    else:
        problem = _count_problem(manifest)
    if problem:
        raise DatasetError(f"{path}: the manifest is damaged ({problem}); it does not match "
                           f"packer's manifest schema (packer/schemas/{SCHEMA_FILE}), so the "
                           "dataset cannot be read: restore the dataset or pack the source "
                           "again")


def _count_problem(manifest: dict) -> str | None:
    """Where the parts, the count and the classes disagree, or None."""
    if manifest["format"] not in formats.registered():
        return (f"format {manifest['format']!r} is none that packer reads: "
                f"{', '.join(formats.registered())}")
    first = 0
    for position, part in enumerate(manifest["parts"]):
        if part["index"] != position:
            return f"part {position} has the index {part['index']}"
        if part["first"] != first:
            return (f"part {part['index']} starts at sample {part['first']:,}, but the parts "
                    f"before it end at {first:,}")
        first += part["count"]
    if first != manifest["count"]:
        return f"the parts hold {first:,} samples, but the count is {manifest['count']:,}"
    for keys in formats.format_module(manifest["format"]).PART_KEYS:
        lacking = [part["index"] for part in manifest["parts"] if not set(keys) & set(part)]
        if lacking:
            return (f"part {lacking[0]} has no {' or '.join(map(repr, keys))}, which every "
                    f"part of a {manifest['format']} dataset has")
    names = [part["name"] for part in manifest["parts"] if "name" in part]
    if len(set(names)) != len(names):
        return "two parts have the same file name"
    classes, counts = manifest.get("classes"), manifest.get("class_counts")
    if len(classes or []) != len(counts or []):
        return f"{len(classes or [])} class names but {len(counts or [])} class counts"
    return _split_problem(manifest)


def _split_problem(manifest: dict) -> str | None:
    """Where a split's ranges leave the dataset, overlap, or disagree with its count."""
    taken, classes = [], len(manifest.get("classes") or [])
    for name, split in (manifest.get("splits") or {"sets": {}})["sets"].items():
        if sum(stop - first for first, stop in split["ranges"]) != split["count"]:
            return f"the ranges of split {name!r} do not hold its count, {split['count']:,}"
        counts = split.get("class_counts")
        if counts is not None and (len(counts) != classes or sum(counts) > split["count"]):
            return (f"split {name!r} has {len(counts)} class counts adding up to "
                    f"{sum(counts):,}, for {classes} classes and {split['count']:,} samples")
        taken += [(first, stop, name) for first, stop in split["ranges"]]
    end = 0
    for first, stop, name in sorted(taken):
        if not end <= first < stop <= manifest["count"]:
            return (f"split {name!r} has the range [{first:,}, {stop:,}), which overlaps "
                    f"another or lies outside the {manifest['count']:,} samples")
        end = stop
    return None


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
    try:
        return path.is_file() and manifest_of_file(path) is not None
    except DatasetError:
        return False
