"""Text and JSON views of manifests and reports, for people and scripts."""

from pathlib import Path

from packer.manifest import MANIFEST_NAME, class_counts

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
    }


def pack_text(manifest: dict, out: Path) -> str:
    s = pack_summary(manifest, out)
    unit = "shard" if manifest["format"] == "webdataset" else "part"
    unit += "" if s["parts"] == 1 else "s"
    lines = [f"packed {s['packed']:,} samples ({_mb(s['bytes'])}) into {out} as "
             f"{s['format']} ({s['parts']} {unit}) in {s['seconds']:.1f} s: "
             f"{s['samples_per_s'] or 0:,.0f} samples/s, {s['mb_per_s'] or 0:,.1f} MB/s"]
    where = str(out / MANIFEST_NAME)
    if manifest["skipped"]:
        lines.append(f"skipped {s['skipped']:,} inputs:")
        lines += _listing(manifest["skipped"], where)
    else:
        lines.append("skipped 0 inputs")
    if manifest["ignored"]:
        lines.append(f"ignored {s['ignored']:,} hidden or OS junk files (listed in {where})")
    links = manifest.get("symlinks") or {"count": 0}
    if links["count"]:
        lines.append(f"symlinks: {links['count']:,} "
                     + ("followed" if links["followed"] else
                        "not followed (--no-follow-symlinks), listed as skipped"))
    if manifest.get("shared_stems"):
        stems = manifest["shared_stems"]
        lines.append(f"{len(stems):,} stems are shared by several files, packed as separate "
                     f"samples (--group-by-stem joins them): {', '.join(stems[:5])}"
                     + (" ..." if len(stems) > 5 else ""))
    if manifest.get("unmatched_labels"):
        names = manifest["unmatched_labels"]
        lines.append(f"{len(names):,} rows of the labels file name no file: "
                     f"{', '.join(names[:5])}" + (" ..." if len(names) > 5 else ""))
    return "\n".join(lines)


def inspect_text(manifest: dict, path: Path) -> str:
    total = sum(p["bytes"] for p in manifest["parts"])
    lines = [f"{path}: {manifest['format']}, {manifest['count']:,} samples, {_mb(total)} "
             f"in {len(manifest['parts'])} part{'' if len(manifest['parts']) == 1 else 's'}",
             f"source: {manifest['source']['path']} (labels: {manifest['source']['labels']}), "
             f"packed by {manifest['tool']} on {manifest['created']}", "fields:"]
    for name, info in manifest["fields"].items():
        size = "" if info["dtype"] == "int64" else f", {_mb(info['bytes'])}"
        lines.append(f"  {name:<10} {info['dtype']:<6} {info['count']:,} samples{size}")
    counts = class_counts(manifest)
    if counts:
        lines.append(f"classes ({len(counts)}):")
        lines += [f"  {i:>4}  {name}: {n:,}" for i, (name, n) in enumerate(counts.items())]
    lines.append("parts:")
    for part in manifest["parts"][:LIST_LIMIT]:
        name = part.get("name", f"samples {part['first']:,}+")
        lines.append(f"  {name}: {part['count']:,} samples, {_mb(part['bytes'])}")
    if len(manifest["parts"]) > LIST_LIMIT:
        lines.append(f"  ... and {len(manifest['parts']) - LIST_LIMIT} more")
    lines.append(f"skipped: {len(manifest['skipped']):,}")
    lines += _listing(manifest["skipped"], str(path / MANIFEST_NAME))
    if manifest["ignored"]:
        lines.append(f"ignored: {len(manifest['ignored']):,} hidden or OS junk files")
    return "\n".join(lines)


def verify_text(report: dict) -> str:
    if report["ok"]:
        return f"OK: {report['count']:,} samples in {report['dataset']} verified"
    lines = [f"FAILED: {report['problem_count']:,} problems in {report['dataset']}:"]
    lines += [f"  {p}" for p in report["problems"]]
    if report["problem_count"] > len(report["problems"]):
        lines.append(f"  ... and {report['problem_count'] - len(report['problems']):,} more")
    return "\n".join(lines)
