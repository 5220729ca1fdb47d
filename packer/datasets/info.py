"""What a dataset holds, as `packer inspect --json` prints it: a library function, so that
a script, `packer view` and the CLI read the same facts.

    import packer
    info = packer.dataset_info("images-wds")     # count, fields, classes, parts, skipped...
"""

from pathlib import Path

from packer.manifest import class_counts
from packer.read.dataset import manifest_or_shards
from packer.text import names_text, plural


def dataset_info(dataset, cache_dir=None, cache_limit=None) -> dict:
    """The facts of a packed dataset (a local path or an s3:// URL); for WebDataset
    shards that other tools wrote, their samples and bytes per shard and per field."""
    manifest, shards = manifest_or_shards(dataset, cache_dir, cache_limit)
    return shards if manifest is None else manifest_info(manifest, dataset)


def manifest_info(manifest: dict, dataset) -> dict:
    return {"path": str(dataset), "format": manifest["format"], "count": manifest["count"],
            "fields": manifest["fields"], "classes": class_counts(manifest),
            "labels": labels_text(manifest), "empty_classes": empty_classes(manifest),
            "parts": manifest["parts"], "source": manifest["source"],
            "skipped": manifest["skipped"], "warnings": manifest.get("warnings") or [],
            "ignored": manifest["ignored"], "records": manifest.get("records"),
            "transform": manifest.get("transform"), "appends": manifest.get("appends") or []}


def labels_text(manifest: dict) -> str:
    """Where the labels came from: `class folders (3 classes)`, `labels.csv (4 classes)`,
    or why there are none."""
    source = manifest["source"]
    kind = source.get("labels", "none")
    if kind == "none":
        return _no_labels_text(source)
    where = {"folders": "class folders",
             "labels-file": Path(source.get("labels_file") or "").name,
             "column": "column " + ", ".join(source.get("label_columns") or []),
             "record-field": f"record field {source.get('label_field')}"}.get(kind, kind)
    classes = manifest.get("classes")
    text = f"{where} ({plural(len(classes), 'class', 'classes')})" if classes else where
    return text + _labels_file_notes(source.get("labels_read") or {}, classes or [])


def _labels_file_notes(read: dict, classes: list[str]) -> str:
    """How a labels file was read, where a reader would want to check it."""
    notes = ["found at the top of the folder, so not packed (--unlabelled packs it as a "
             "file)"] if read.get("found_in_source") else []
    if read.get("ids") == "numeric order":
        shown = ", ".join(f"{name} is {i}" for i, name in enumerate(classes[:4]))
        notes.append(f"a label is negative, so class ids are the labels' ranks in numeric "
                     f"order ({shown}{', ...' if len(classes) > 4 else ''})")
    if read.get("header"):
        notes.append("its first row was taken as a header: " + ",".join(read["header"]))
    if read.get("encoding") not in (None, "utf-8", "utf-8-sig"):
        notes.append(f"read as {read['encoding']}; if the class names look wrong, pass "
                     + ("--labels with " if read.get("found_in_source") else "") + "--encoding")
    return "".join(f"; {note}" for note in notes)


def _no_labels_text(source: dict) -> str:
    if not source.get("top_files"):
        return "none"
    names = names_text(source["top_files"], source["top_file_count"])
    return (f"none — {source['path']} has files at its top level ({names}) so it is not "
            "an ImageFolder layout; move them or pass --labels")


def empty_classes(manifest: dict) -> list[str]:
    """Classes that no packed sample has."""
    return [name for name, count in class_counts(manifest).items() if not count]
