"""Text and JSON views of manifests and reports, for people and scripts."""

from pathlib import Path

from packer.datasets.info import (
    empty_classes,
    labels_text,
    leak_text,
    splits_info,
    splits_text,
)
from packer.formats import format_module
from packer.manifest import MANIFEST_NAME, class_counts
from packer.packing.transform import reencoded_text
from packer.sample import PIL_FORMATS, split_name
from packer.sources.files.tree import NOTE_REASON
from packer.text import names_text, plural

LIST_LIMIT = 20


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def _listing(entries: list[dict], where: str) -> list[str]:
    lines = [f"  {e['path']}: {e['reason']}" for e in entries[:LIST_LIMIT]]
    if len(entries) > LIST_LIMIT:
        lines.append(f"  ... and {len(entries) - LIST_LIMIT:,} more, all in {where}")
    return lines


def pack_summary(manifest: dict, out: Path) -> dict:
    seconds = manifest["seconds"]
    packed_bytes = sum(f["bytes"] for f in manifest["fields"].values())
    return {
        "output": str(out), "format": manifest["format"], "packed": manifest["count"],
        "skipped": len(manifest["skipped"]), "ignored": len(manifest["ignored"]),
        "bytes": packed_bytes, "output_bytes": sum(p["bytes"] for p in manifest["parts"]),
        "parts": len(manifest["parts"]), "seconds": round(seconds, 3),
        "samples_per_s": round(manifest["count"] / seconds, 1) if seconds else None,
        "mb_per_s": round(packed_bytes / 1e6 / seconds, 2) if seconds else None,
        "symlinks": manifest.get("symlinks"), "skipped_inputs": manifest["skipped"],
        "warned": len(manifest.get("warnings") or []),
        "warned_inputs": manifest.get("warnings") or [],
        "labels": labels_text(manifest), "empty_classes": empty_classes(manifest),
        "splits": splits_info(manifest),
    }


def _shared_stems(manifest: dict) -> list[str]:
    """Stems shared by several files that were all packed (none of them skipped)."""
    skipped = set()
    for entry in manifest["skipped"]:
        folder, _, name = entry["path"].rpartition("/")
        skipped.add(f"{folder}/{split_name(name)[0]}" if folder else split_name(name)[0])
    return [stem for stem in manifest.get("shared_stems") or [] if stem not in skipped]


def pack_text(manifest: dict, out: Path) -> str:
    s = pack_summary(manifest, out)
    layout = format_module(manifest["format"])
    unit = layout.PART if s["parts"] == 1 else layout.PART + "s"
    lines = [f"packed {plural(s['packed'], 'sample')} ({_mb(s['bytes'])}) into {out} as "
             f"{s['format']} ({s['parts']} {unit}) in {s['seconds']:.1f} s: "
             f"{s['samples_per_s'] or 0:,.0f} samples/s, {s['mb_per_s'] or 0:,.1f} MB/s"]
    lines += filter(None, [layout.layout_text(manifest), reencoded_text(manifest),
                           _growth_text(manifest, s["output_bytes"]), _header_only_text(manifest)])
    where = f"{out}/{MANIFEST_NAME}"
    if manifest["skipped"]:
        lines.append(f"skipped {plural(s['skipped'], 'input')}:")
        lines += _listing(manifest["skipped"], where)
    else:
        lines.append("skipped 0 inputs")
    if s["warned"]:
        lines.append(f"decoder warnings for {plural(s['warned'], 'packed input')}:")
        lines += _listing(_warning_entries(manifest), where)
    if manifest["ignored"]:
        lines.append(f"ignored {_ignored_text(manifest)} (listed in {where})")
    links = manifest.get("symlinks") or {"count": 0}
    if links["count"]:
        lines.append(f"symlinks: {links['count']:,} "
                     + ("followed" if links["followed"] else
                        "not followed (--no-follow-symlinks), listed as skipped"))
    stems = _shared_stems(manifest)
    if stems:
        why = ("extensions that differ only in case, which WebDataset would merge"
               if manifest["options"].get("group_by_stem") else "--group-by-stem joins them")
        lines.append(f"{plural(len(stems), 'stem is', 'stems are')} shared by several files, "
                     f"packed as separate samples ({why}): {names_text(stems)}")
    if manifest.get("unmatched_labels"):
        names = manifest["unmatched_labels"]
        rows = plural(len(names), "row of the labels file names", "rows of the labels file name")
        lines.append(f"{rows} no file: {names_text(names)}")
    return "\n".join(lines + _labels_lines(manifest) + splits_text(manifest))


def _header_only_text(manifest: dict) -> str | None:
    """Images that the default check looked at only by their header, which a damaged
    file can pass: packed bit for bit is not decodes."""
    if (manifest.get("options") or {}).get("check") != "header" or "transform" in manifest:
        return None
    images = sum(spec.get("count", 0) for name, spec in manifest["fields"].items()
                 if name.lower() in PIL_FORMATS)
    if not images:
        return None
    return (f"checked by their header only: {plural(images, 'image')} (signature and end "
            "marker, not a decode); `--check decode` decodes each one as the loader will, "
            "and skips those that fail (about 5x the time of this check)")


GROWTH_LIMIT = 10  # stored bytes per input byte past which a summary says so


def _growth_text(manifest: dict, stored: int) -> str | None:
    """A pack that stores far more than it read: many tiny samples, each paying the
    format's own bytes (a tar member's headers, an LMDB entry)."""
    read = manifest["source"].get("bytes") or 0
    if not read or stored <= GROWTH_LIMIT * read:
        return None
    per_sample = stored / max(1, manifest["count"])
    return (f"note: stored {_mb(stored)}, {stored / read:,.0f} times the {_mb(read)} read, "
            f"{per_sample:,.0f} bytes a sample: each of the {manifest['count']:,} samples pays "
            "the format's own bytes. Fewer, larger samples store less: --window N for a dump "
            "(N records a sample), sample = \"file\" in a spec that describes a whole file, "
            "or --to hdf5")


def _labels_lines(manifest: dict) -> list[str]:
    lines = [f"labels: {labels_text(manifest)}"]
    if empty_classes(manifest):
        lines.append(f"classes with no samples: {names_text(empty_classes(manifest))}")
    return lines


def dataset_text(manifest: dict, path: Path) -> str:
    total = sum(p["bytes"] for p in manifest["parts"])
    lines = [f"{path}: {manifest['format']}, {plural(manifest['count'], 'sample')}, "
             f"{_mb(total)} in {plural(len(manifest['parts']), 'part')}",
             f"source: {manifest['source']['path']}, packed by {manifest['tool']} on "
             f"{manifest['created']}",
             *(f"appended: {plural(entry['count'], 'sample')} from {entry['source']} on "
               f"{entry['created']} (generation {entry['generation']})"
               for entry in manifest.get("appends") or []), *_labels_lines(manifest)]
    lines += filter(None, [format_module(manifest["format"]).layout_text(manifest),
                           reencoded_text(manifest)])
    lines.append("fields:")
    for name, info in manifest["fields"].items():
        size = "" if name == "cls" else f", {_mb(info['bytes'])}"
        lines.append(f"  {name:<10} {info['dtype']:<6} {plural(info['count'], 'sample')}{size}")
    lines += splits_text(manifest)
    counts = class_counts(manifest)
    if counts:
        lines.append(f"classes ({len(counts)}):")
        lines += [f"  {i:>4}  {name}: {n:,}{_per_split(manifest, i)}"
                  for i, (name, n) in enumerate(counts.items())]
    lines.append("parts:")
    for part in manifest["parts"][:LIST_LIMIT]:
        name = part.get("name", f"samples {part['first']:,}+")
        lines.append(f"  {name}: {plural(part['count'], 'sample')}, {_mb(part['bytes'])}")
    if len(manifest["parts"]) > LIST_LIMIT:
        lines.append(f"  ... and {len(manifest['parts']) - LIST_LIMIT} more")
    lines.append(f"skipped: {len(manifest['skipped']):,}")
    lines += _listing(manifest["skipped"], f"{path}/{MANIFEST_NAME}")
    if manifest.get("warnings"):
        lines.append(f"decoder warnings: {len(manifest['warnings']):,}")
        lines += _listing(_warning_entries(manifest), f"{path}/{MANIFEST_NAME}")
    if manifest["ignored"]:
        lines.append(f"ignored: {_ignored_text(manifest)}")
    return "\n".join(lines)


def _leaks_lines(report: dict) -> list[str]:
    """A verify's leaks: each content found in two splits, with its keys."""
    if not report.get("leak_count"):
        return []
    lines = [f"leak: {plural(report['leak_count'], 'content lies', 'contents lie')} in two "
             "splits or more (the same bytes; `packer pack --dedupe` stores each once):"]
    lines += ["  " + leak_text(leak) for leak in report["leaks"][:LIST_LIMIT]]
    if report["leak_count"] > LIST_LIMIT:
        lines.append(f"  ... and {report['leak_count'] - LIST_LIMIT:,} more (--json lists "
                     f"{min(report['leak_count'], len(report['leaks'])):,})")
    return lines


def _per_split(manifest: dict, class_id: int) -> str:
    """`  (train 40, val 5, test 5)`: a class's samples in each split, where there are splits."""
    splits = manifest.get("splits")
    if not splits:
        return ""
    return "  (" + ", ".join(f"{name} {entry['class_counts'][class_id]:,}"
                             for name, entry in splits["sets"].items()) + ")"


def shards_text(shards: dict) -> str:
    """`packer inspect` of WebDataset shards that packer did not pack."""
    parts = shards["parts"]
    lines = [f"{shards['path']}: WebDataset shards without a packer manifest, "
             f"{plural(shards['count'], 'sample')} in {plural(len(parts), 'shard')}", "fields:"]
    lines += [f"  {name:<10} {plural(info['count'], 'sample')}, {_mb(info['bytes'])}"
              for name, info in shards["fields"].items()]
    lines.append("shards:")
    for part in parts[:LIST_LIMIT]:
        size = "" if part["bytes"] is None else f", {_mb(part['bytes'])}"
        how = " (compressed or remote: streamed, not indexed)" if part["streamed"] else ""
        lines.append(f"  {part['name']}: {plural(part['count'], 'sample')}{size}{how}")
    if len(parts) > LIST_LIMIT:
        lines.append(f"  ... and {len(parts) - LIST_LIMIT} more")
    return "\n".join(lines)


def _warning_entries(manifest: dict) -> list[dict]:
    """The manifest's warnings as entries to list: a file and what was said of it."""
    return [{"path": e["path"], "reason": "; ".join(e["warnings"])}
            for e in manifest.get("warnings") or []]


def _ignored_text(manifest: dict) -> str:
    """`3 hidden or OS junk files`, `README.md` (notes at the top), `the labels file`, or
    those joined by `and`."""
    reasons = [e["reason"] for e in manifest["ignored"]]
    notes = [e["path"] for e in manifest["ignored"] if e["reason"] == NOTE_REASON]
    junk = len(reasons) - len(notes) - reasons.count("the labels file")
    texts = [plural(junk, "hidden or OS junk file")] if junk else []
    texts += [f"{names_text(notes)} (a note beside the folders, not a sample)"] if notes else []
    return " and ".join(texts + (["the labels file"] if "the labels file" in reasons else []))


def verify_text(report: dict) -> str:
    note = [f"note: {report['reencoded']}"] if report.get("reencoded") else []
    note += _leaks_lines(report)
    if report["ok"]:
        return "\n".join([f"OK: {plural(report['count'], 'sample')} in {report['dataset']} "
                          "verified", *note])
    lines = [f"FAILED: {plural(report['problem_count'], 'problem')} in {report['dataset']}:"]
    lines += [f"  {p}" for p in report["problems"]]
    if report["problem_count"] > len(report["problems"]):
        lines.append(f"  ... and {report['problem_count'] - len(report['problems']):,} more")
    return "\n".join(lines + note)
