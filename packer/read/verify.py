"""Verifying: every sample readable, every part matching the manifest, and (with
`--against`) every packed file bit-identical to its source and every source file
either packed or listed as skipped. Each part is checked by its format
(`verify_part`); the comparison with the source is the source kind's (`against`)."""

from pathlib import Path

from tqdm import tqdm

from packer.errors import UsageProblem
from packer.read.dataset import parts_on_disk
from packer.sources import recorded_kind, source_kinds

MAX_PROBLEMS = 100


def _comparer(manifest: dict, against: Path):
    """What compares packed samples with `against`, the folder they were packed from."""
    source, kind = manifest["source"], recorded_kind(manifest)
    if kind is None or kind.against is None:
        takers = " or ".join(m.NAME for m in source_kinds() if m.against is not None)
        raise UsageProblem(f"--against {against}: --against takes the source folder of a "
                           f"dataset packed from {takers}; this one was packed from a "
                           f"{source.get('kind')} ({source['path']}), so `packer verify` "
                           "checks it against the manifest's checksums alone")
    if not against.is_dir():
        raise UsageProblem(f"--against {against}: not a folder; --against takes the folder "
                           "the dataset was packed from")
    return kind.against(manifest, against)


def verify(dataset, against: Path | None = None, progress: bool = True) -> dict:
    """A report: `ok`, `count`, and `problems` (at most MAX_PROBLEMS, `problem_count` all)."""
    manifest, module, parts = parts_on_disk(dataset)
    compare = _comparer(manifest, Path(against)) if against is not None else None
    problems, count = [], 0
    bar = tqdm(total=manifest["count"], unit="sample", disable=not progress, desc="verifying")
    for part, on_disk in parts:
        name = part.get("name", f"samples {part['first']}..{part['first'] + part['count'] - 1}")
        part_problems, seen = module.verify_part(*on_disk, name, compare)
        problems += part_problems
        count += seen
        bar.update(seen)
    bar.close()
    if count != manifest["count"]:
        problems.append(f"{count} samples read, the manifest says {manifest['count']}")
    if compare:
        problems += compare.unaccounted(manifest)
    return {"dataset": str(dataset), "format": manifest["format"], "ok": not problems,
            "count": count, "problem_count": len(problems), "problems": problems[:MAX_PROBLEMS]}
