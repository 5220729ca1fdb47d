"""Verifying: every sample readable, every part matching the manifest, and (with
`--against`) every packed file bit-identical to its source and every source file
either packed or listed as skipped."""

import hashlib
import tarfile
from pathlib import Path

import msgpack
from tqdm import tqdm

from packer.errors import UsageProblem
from packer.read.dataset import label_field, open_packed
from packer.sample import KEY, restored_path, sample_digest
from packer.sources.files.scan import scan_folder

MAX_PROBLEMS = 100
_UNLOCATED = ("{name}: every member reads as tar, so the change is in a file's bytes or in "
              "padding; tar shards keep no per-sample digests, so `packer verify DATASET "
              "--against SOURCE` is what names a changed file")
_READ_ERRORS = (OSError, ValueError, KeyError, tarfile.TarError, msgpack.UnpackException)


def _file_problems(folder: Path, part: dict) -> list[str]:
    """A tar shard's size and sha256 against the manifest."""
    path = folder / part["name"]
    if not path.is_file():
        return [f"{part['name']}: missing"]
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    if path.stat().st_size != part["bytes"] or digest.hexdigest() != part["sha256"]:
        return [f"{part['name']}: {path.stat().st_size:,} bytes, sha256 {digest.hexdigest()[:12]}"
                f"; the manifest says {part['bytes']:,} bytes, sha256 {part['sha256'][:12]}"]
    return []


def _sample_problems(folder: Path, manifest: dict, module, part: dict, name: str,
                     compare) -> tuple[list[str], int]:
    """A part read sample by sample: readable, counted, digested, compared."""
    problems, digest, seen, key = [], hashlib.sha256(), 0, None
    try:
        for sample in module.read_part(folder, manifest, part):
            if "samples_sha256" in part:
                digest.update(sample_digest(sample))
            seen, key = seen + 1, sample[KEY]
            if compare:
                problems += compare.check(sample)
    except _READ_ERRORS as err:
        after = f"sample {key!r}, the {seen:,} read before it" if key else "its start"
        problems.append(f"{name}: unreadable after {after}: {err}")
    if seen != part["count"]:
        stop = f" (reading stops after sample {key!r})" if key and seen < part["count"] else ""
        problems.append(f"{name}: {seen} samples, the manifest says {part['count']}{stop}")
    elif "samples_sha256" in part and digest.hexdigest() != part["samples_sha256"]:
        problems.append(f"{name}: sample contents differ from the manifest's digest; a part "
                        "keeps one digest over its samples, so `packer verify DATASET "
                        "--against SOURCE` is what names a changed file")
    return problems, seen


def _columns_problems(folder: Path, manifest: dict, part: dict,
                      name: str) -> tuple[list[str], int]:
    """An HDF5 part written as columns or records, against its checksum."""
    from packer.formats.hdf5 import Reader

    reader = Reader(folder, manifest)
    try:
        rows, crc = reader.checksum(part)
    except _READ_ERRORS as err:
        return [f"{name}: unreadable: {err}"], 0
    finally:
        reader.close()
    if rows != part["count"]:
        return [f"{name}: {rows} samples, the manifest says {part['count']}"], rows
    if crc != part.get("columns_crc32", part.get("records_crc32")):
        return [f"{name}: data differ from the checksum in the manifest"], rows
    return [], rows


class _Against:
    """Compares packed samples with the source folder they came from."""

    def __init__(self, manifest: dict, source: Path):
        self.source = source
        self.label = label_field(manifest)
        self.classes = manifest.get("classes") or []
        self.by_folder = manifest["source"]["labels"] == "folders"
        self.seen: set[str] = set()

    def check(self, sample: dict) -> list[str]:
        problems = []
        for field, value in sample.items():
            if field in (KEY, self.label):
                continue
            rel = restored_path(sample[KEY], field)
            self.seen.add(rel)
            try:
                original = (self.source / rel).read_bytes()
            except OSError as err:
                problems.append(f"{rel}: packed, but cannot read the source file: {err.strerror}")
                continue
            if original != value:
                problems.append(f"{rel}: packed bytes differ from the source file")
            if self.by_folder and self.classes[sample[self.label]] != rel.split("/", 1)[0]:
                problems.append(f"{rel}: class {self.classes[sample[self.label]]!r}, but the "
                                "file is in another class folder")
        return problems

    def unaccounted(self, manifest: dict) -> list[str]:
        """Source files neither packed nor listed as skipped or ignored."""
        options = manifest["options"]
        scan = scan_folder(self.source, labels=Path(options["labels"]) if options["labels"]
                           else None, unlabelled=options["unlabelled"],
                           group_by_stem=options["group_by_stem"],
                           follow_symlinks=options["follow_symlinks"],
                           labels_encoding=options.get("encoding"))
        listed = {e["path"] for e in manifest["skipped"] + manifest["ignored"]}
        listed |= {e["path"] for e in scan.notes.skipped + scan.notes.ignored}
        return [f"{p}: in the source but neither packed nor listed as skipped"
                for s in scan.samples() for _, p in s.files
                if p not in self.seen and p not in listed]


def _check_against(manifest: dict, against: Path) -> None:
    source = manifest["source"]
    if source.get("kind") != "files":
        raise UsageProblem(f"--against {against}: --against takes the source folder of a "
                           f"dataset packed from files; this one was packed from a "
                           f"{source.get('kind')} ({source['path']}), so `packer verify` "
                           "checks it against the manifest's checksums alone")
    if not against.is_dir():
        raise UsageProblem(f"--against {against}: not a folder; --against takes the folder "
                           "the dataset was packed from")


def verify(dataset: Path, against: Path | None = None, progress: bool = True) -> dict:
    """A report: `ok`, `count`, and `problems` (at most MAX_PROBLEMS, `problem_count` all)."""
    manifest, module = open_packed(dataset)
    if against is not None:
        _check_against(manifest, Path(against))
    compare = _Against(manifest, Path(against)) if against else None
    problems, count = [], 0
    bar = tqdm(total=manifest["count"], unit="sample", disable=not progress, desc="verifying")
    for part in manifest["parts"]:
        name = part.get("name", f"samples {part['first']}..{part['first'] + part['count'] - 1}")
        file_problems = _file_problems(Path(dataset), part) if "sha256" in part else []
        if "columns_crc32" in part or "records_crc32" in part:  # checked whole, not by row
            part_problems, seen = _columns_problems(Path(dataset), manifest, part, name)
        else:
            part_problems, seen = _sample_problems(Path(dataset), manifest, module, part, name,
                                                   compare)
        if file_problems and not part_problems:
            part_problems = [_UNLOCATED.format(name=name)]
        problems += file_problems + part_problems
        count += seen
        bar.update(seen)
    bar.close()
    if count != manifest["count"]:
        problems.append(f"{count} samples read, the manifest says {manifest['count']}")
    if compare:
        problems += compare.unaccounted(manifest)
    return {"dataset": str(dataset), "format": manifest["format"], "ok": not problems,
            "count": count, "problem_count": len(problems), "problems": problems[:MAX_PROBLEMS]}
