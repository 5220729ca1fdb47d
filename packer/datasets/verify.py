"""Verifying: every sample readable, every part matching the manifest, and (with
`--against`) every packed file bit-identical to its source and every source file
either packed or listed as skipped; a dataset with splits, for content found in two of
them (packer.datasets.leaks). Each part is checked by its format (`verify_part`); the
comparison with the source is the source kind's (`against`)."""

import os
from pathlib import Path, PurePosixPath

from tqdm import tqdm

from packer.datasets.leaks import LeakCheck
from packer.errors import UsageProblem
from packer.manifest import DIGEST_KEY, digest_matches
from packer.packing.transform import reencoded_text, transform_of
from packer.read.dataset import parts_on_disk
from packer.sample import (
    DISAMBIGUATOR,
    IMAGE_FIELDS,
    KEY,
    PIL_FORMATS,
    RAW_IMAGE_FIELD,
    decode_key,
    field_bytes,
    restored_path,
)
from packer.sources import recorded_kind, source_kinds

MAX_PROBLEMS = 100


def _comparer(manifest: dict, against: Path):
    """What compares packed samples with `against`, the folder they were packed from."""
    source, kind = manifest["source"], recorded_kind(manifest)
    if kind is None or kind.against is None:
        takers = " or ".join(m.NAME for m in source_kinds() if m.against is not None)
        raise UsageProblem(f"--against {against}: --against takes the source of a "
                           f"dataset packed from {takers}; this one was packed by the "
                           f"{kind.NAME if kind else source.get('kind')} source from "
                           f"{source['path']}, so `packer verify` checks it against the "
                           "manifest's checksums alone")
    if not against.exists():
        raise UsageProblem(f"--against {against}: no such file or folder; --against takes "
                           "what the dataset was packed from")
    if not getattr(kind, "AGAINST_FILES", False) and not against.is_dir():
        raise UsageProblem(f"--against {against}: not a folder; --against takes the folder "
                           "the dataset was packed from")
    compare = kind.against(manifest, against)
    transform = transform_of(manifest)
    return Reencoded(compare, transform, against) if transform else compare


class Reencoded:
    """--against for a dataset whose images were transformed when packed: each stored
    image is compared with its source file transformed again now (the same Pillow
    encodes the same bytes); the other fields byte for byte, as always."""

    def __init__(self, compare, transform, folder: Path):
        self.compare, self.transform, self.folder = compare, transform, folder
        self._listings: dict[Path, list[str]] = {}

    def check(self, sample: dict) -> list[str]:
        images = [name for name in sample if name == RAW_IMAGE_FIELD
                  or name.rsplit(".", 1)[-1].lower() in IMAGE_FIELDS]
        problems = self.compare.check({n: v for n, v in sample.items() if n not in images})
        for name in images:
            rel = self._source_file(sample[KEY], name)
            if rel is None:
                problems.append(f"{decode_key(sample[KEY])}: its stored {name} image has no "
                                "source image file")
                continue
            self.compare.seen.add(rel)
            try:
                field, again = self.transform.image((self.folder / rel).read_bytes(),
                                                    rel.rsplit(".", 1)[-1])
            except (OSError, ValueError, SyntaxError) as err:
                problems.append(f"{rel}: packed, but cannot be read and transformed: {err}")
                continue
            if field != name or field_bytes(again) != field_bytes(sample[name]):
                problems.append(f"{rel}: the stored {name} differs from the source file "
                                "transformed again (changed since, or another Pillow)")
        return problems

    def _source_file(self, key: str, field: str) -> str | None:
        """The relative path of the image file a stored image field was made from."""
        if DISAMBIGUATOR in key:  # one of several files of a stem: the key names its extension
            return restored_path(key, key.partition(DISAMBIGUATOR)[2])
        stem = PurePosixPath(decode_key(key))
        folder = self.folder / stem.parent
        if folder not in self._listings:
            self._listings[folder] = sorted(os.listdir(folder)) if folder.is_dir() else []
        names = [n for n in self._listings[folder] if n.rpartition(".")[0] == stem.name
                 and n.rpartition(".")[2].lower() in PIL_FORMATS]
        made = [n for n in names if self.transform.stored_field(n.rpartition(".")[2]) == field]
        found = (made or [None])[0]
        return found and (stem.parent / found).as_posix()

    def unaccounted(self, manifest: dict) -> list[str]:
        return self.compare.unaccounted(manifest)


def _check_sources(manifest: dict, against) -> None:
    """A dataset appended to is compared with every source that went in, or none."""
    given = against if isinstance(against, list) else [] if against is None else [against]
    sources = [manifest["source"]["path"], *(a["source"] for a in manifest.get("appends", []))]
    if given and len(given) != len(sources):
        raise UsageProblem(f"--against: the dataset holds the samples of {len(sources)} "
                           f"sources ({', '.join(sources)}), and {len(given)} were given; "
                           "repeat --against for each, e.g. "
                           + " ".join(f"--against {s}" for s in sources))


class EachSource:
    """--against several folders (a dataset appended to): each sample compared with the
    folder that holds its file; every folder's files packed or listed as skipped."""

    def __init__(self, comparers: list[tuple[Path, object]]):
        self.comparers = comparers

    def check(self, sample: dict) -> list[str]:
        field = next((n for n in sample if n not in (KEY, "cls")), None)
        rel = restored_path(sample[KEY], field) if field else decode_key(sample[KEY])
        for folder, compare in self.comparers:
            if (folder / rel).exists():
                return compare.check(sample)
        return [f"{rel}: packed, but in none of the --against folders"]

    def unaccounted(self, manifest: dict) -> list[str]:
        return [problem for _, compare in self.comparers
                for problem in compare.unaccounted(manifest)]


def _manifest_problems(manifest: dict) -> list[str]:
    """A manifest sealed with its own digest that no longer matches it: edited or damaged
    after the pack (two class names swapped still pass the schema, not the digest)."""
    if DIGEST_KEY in manifest and not digest_matches(manifest):
        return [f"the manifest differs from what the pack wrote (its {DIGEST_KEY} no longer "
                "matches): it was edited or damaged since; restore it from a copy or pack "
                "the source again"]
    return []


def verify(dataset, against: Path | list[Path] | None = None, progress: bool = True, cache_dir=None,
           cache_limit=None) -> dict:
    """A report: `ok`, `count`, and `problems` (at most MAX_PROBLEMS, `problem_count` all).
    An s3:// dataset is read through the part cache (`cache_dir`, at most `cache_limit`)."""
    manifest, module, parts = parts_on_disk(dataset, cache_dir, cache_limit)
    _check_sources(manifest, against)
    if isinstance(against, list):
        compare = EachSource([(Path(a), _comparer(manifest, Path(a))) for a in against])
    else:
        compare = _comparer(manifest, Path(against)) if against is not None else None
    if manifest.get("splits"):
        compare = leaks = LeakCheck(manifest, compare)
    problems, count = _manifest_problems(manifest), 0
    bar = tqdm(total=manifest["count"], unit="sample", disable=not progress, desc="verifying")
    whole = getattr(module, "dataset_problems", None)  # checks of the dataset as a whole
    for part, on_disk in parts:
        if whole is not None:
            problems += whole(*on_disk[:2])
            whole = None
        name = part.get("name", f"samples {part['first']}..{part['first'] + part['count'] - 1}")
        if manifest.get("splits"):
            leaks.at(part["first"])
        part_problems, seen = module.verify_part(*on_disk, name, compare)
        problems += part_problems
        count += seen
        bar.update(seen)
    bar.close()
    if count != manifest["count"]:
        problems.append(f"{count} samples read, the manifest says {manifest['count']}")
    if compare:
        problems += compare.unaccounted(manifest)
    found = leaks.leaks() if manifest.get("splits") else []
    return {"dataset": str(dataset), "format": manifest["format"], "ok": not problems,
            "reencoded": reencoded_text(manifest), "leak_count": len(found),
            "leaks": found[:MAX_PROBLEMS],
            "count": count, "problem_count": len(problems), "problems": problems[:MAX_PROBLEMS]}
