"""What a dataset holds, as `packer inspect --json` prints it: a library function, so that
a script, `packer view` and the CLI read the same facts.

    import packer
    info = packer.dataset_info("images-wds")     # count, fields, classes, parts, skipped...
"""

from pathlib import Path

from packer.manifest import class_counts
from packer.read.dataset import manifest_or_shards
from packer.sample import decode_key
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
            "transform": manifest.get("transform"), "splits": splits_info(manifest),
            "appends": manifest.get("appends") or []}


def splits_info(manifest: dict) -> dict | None:
    """The splits the pack made, without their index ranges: how each was made, and per
    split its count and class counts by name; the leaks (identical content in two)."""
    splits = manifest.get("splits")
    if not splits:
        return None
    classes = manifest.get("classes") or []
    sets = {name: {"count": entry["count"],
                   "classes": dict(zip(classes, entry["class_counts"] or [], strict=False))}
            for name, entry in splits["sets"].items()}
    return {**{k: v for k, v in splits.items() if k not in ("sets", "leaks")},
            "sets": sets, "leaks": splits["leaks"]}


def leak_text(leak: dict, most: int = 3) -> str:
    """`a/1 (train) = b/2 (test)`: the samples (paths without their extension) of one
    content found in several splits, one of each split first."""
    firsts = [f"{decode_key(keys[0])} ({name})" for name, keys in leak["keys"].items()]
    others = [f"{decode_key(key)} ({name})" for name, keys in leak["keys"].items()
              for key in keys[1:]]
    shown = max(most, len(firsts))
    more = f" and {len(others) + len(firsts) - shown:,} more" if len(others) + len(
        firsts) > shown else ""
    return " = ".join((firsts + others)[:shown]) + more


def splits_summary(manifest: dict) -> str | None:
    """`train 80, val 20 (train=0.8, val=0.2; stratified by class, seed 0)`, or None."""
    info = splits_info(manifest)
    if info is None:
        return None
    if info["method"] == "folders":
        how = "by the source's folders"
    else:
        shares = ", ".join(f"{name}={share:g}" for name, share in info["ratios"].items())
        kept = (f"groups {info['by']} kept whole" if info["by"] else
                "stratified by class" if info["stratified"] else "random")
        how = f"{shares}; {kept}, seed {info['seed']}"
    return ", ".join(f"{name} {entry['count']:,}" for name, entry in info["sets"].items()
                     ) + f" ({how})"


def splits_text(manifest: dict) -> list[str]:
    """`splits: train 80, val 20 (...)`, and a line on identical content found in two
    splits."""
    info = splits_info(manifest)
    if info is None:
        return []
    lines = [f"splits: {splits_summary(manifest)}"]
    lines += [f"note: {note}" for note in info.get("notes") or []]
    if info["leak_count"]:
        shown = "; ".join(leak_text(leak) for leak in info["leaks"][:3])
        lines.append(f"leak: {plural(info['leak_count'], 'content lies', 'contents lie')} in "
                     f"two splits or more (the same bytes), e.g. {shown}; "
                     + ("all" if len(info["leaks"]) == info["leak_count"] else
                        f"the first {len(info['leaks']):,}")
                     + " listed in the manifest's splits.leaks. --dedupe stores each content "
                     "once")
    return lines


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
