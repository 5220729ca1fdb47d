"""Appending: samples of a new source added to a packed dataset, its parts kept.

The dataset's files are staged in `OUT.partial` (hard links to the files of a
folder dataset, which no writer changes: tar shards, TFRecord parts and their
indexes, LMDB's data.mdb and earlier generations' files), the format's writer
resumes after the dataset's parts and writes the new samples as new parts (new
shards and TFRecord parts, an LMDB file of this generation's own, `gen-%06d.mdb`;
an HDF5 file of its own beside an index file, hdf5/generations.py), and the whole
is swapped in at `OUT` as a pack is. The work is that of packing the new samples,
not of copying the dataset. A killed append leaves `OUT` as it was and `--resume`
finishes it; a reader holding the old files open keeps reading the old data.

Classes merge by name (a new class gets the next id); keys already in the dataset
are refused, or with `--on-duplicate skip` left out and listed as skipped. The
manifest's `appends` records each generation (the original pack is generation 0).
"""

import json
import os
import shutil
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from packer.errors import PackerError, Resumable, UsageProblem
from packer.formats import format_module
from packer.formats.manifests import local_manifest
from packer.manifest import DIGEST_KEY, MANIFEST_NAME, partial_path, seal, write_json_atomic
from packer.packing import writing
from packer.packing.lock import output_lock
from packer.packing.options import PackOptions, for_source
from packer.packing.pipeline import _setup
from packer.packing.resume import check_unchanged
from packer.packing.space import disk_full_reported
from packer.packing.tally import Tally
from packer.packing.writing import PROGRESS_NAME, write_samples
from packer.sample import KEY, LAYOUT_VERSION, SAMPLES, restored_path
from packer.sources import open_source
from packer.storage.url import is_s3
from packer.text import names_text, plural, without_addresses

ON_DUPLICATE = ("error", "skip")
DUPLICATE_REASON = "its key is already in the dataset (--on-duplicate skip)"
_LEFT_OUT = {MANIFEST_NAME, "lock.mdb"}  # rewritten, or made again


class Relabel:
    """The workers' step after reading (in place of the transform): keys already in the
    dataset made skipped inputs, the transform applied, class ids mapped to the
    dataset's (`ids[new id]`). Picklable: it travels with each job."""

    def __init__(self, transform, ids: list[int] | None, duplicates: set[str]):
        self.transform, self.ids, self.duplicates = transform, ids, duplicates

    def apply(self, outcomes: list[tuple]) -> list[tuple]:
        outcomes = [self._duplicate(sample) if sample and sample[KEY] in self.duplicates
                    else (sample, notes) for sample, notes in outcomes]
        if self.transform is not None:
            outcomes = self.transform.apply(outcomes)
        if self.ids:
            for sample, _ in outcomes:
                if sample is not None and isinstance(sample.get("cls"), int):
                    sample["cls"] = self.ids[sample["cls"]]
        return outcomes

    @staticmethod
    def _duplicate(sample: dict) -> tuple:
        field = next((name for name in sample if name not in (KEY, "cls")), None)
        path = restored_path(sample[KEY], field) if field else sample[KEY]
        return None, [{"path": path, "reason": DUPLICATE_REASON}]


def append_local(path, out, options: PackOptions, on_duplicate: str = "error",
                 on_part=None) -> dict:
    """Add the samples of `path` to the packed dataset `out` (local); returns the new
    manifest, with `appended` (this generation's entry) beside it."""
    if is_s3(out):
        raise UsageProblem(f"--append {out}: appending takes a dataset on local disk; "
                           "append to a local copy and upload it")
    path, out = path if is_s3(path) else Path(path), Path(out)
    with output_lock(out):
        old = _appendable(out)
        options = replace(for_source(path, options), to=old["format"],
                          shard_size=old["options"].get("shard_size", options.shard_size),
                          max_count=old["options"].get("max_count"))
        return _append_locked(path, out, old, options, on_duplicate, on_part)


def _appendable(out: Path) -> dict:
    if not out.exists() and not partial_path(out).exists():
        raise UsageProblem(f"--append {out}: no such dataset; pack it first with -o {out}")
    manifest = local_manifest(out) if out.exists() else None
    if manifest is None:
        raise UsageProblem(f"--append {out}: only {partial_path(out)} is there; an earlier "
                           "pack was interrupted: finish it with --resume -o first")
    if manifest["format"] == "hdf5" and out.is_dir():
        raise UsageProblem(f"--append {out}: an HDF5 dataset in the older folder layout; "
                           "pack it again (a one-file dataset) to append to it")
    if manifest.get("splits"):
        raise UsageProblem(f"--append {out}: its samples were split when packed "
                           f"({', '.join(manifest['splits']['sets'])}), and an append would "
                           "leave the new samples in no split or check them for leaks against "
                           "none; pack the sources together with --split instead")
    if manifest.get("records") or manifest.get("key_dataset") is None:
        raise UsageProblem(f"--append {out}: its samples are keyed by their index (a table "
                           "or a binary dump); appending takes datasets of keyed samples")
    return manifest


def _append_locked(path, out: Path, old: dict, options: PackOptions, on_duplicate: str,
                   on_part) -> dict:
    source, read_job = open_source(path, options)
    setup = {**_setup(source, options), "log": None}
    if setup["logged"]:
        raise UsageProblem(f"--append {out}: --split, --dedupe and a source split by its "
                           f"train/ val/ test/ folders ({path}) make splits when a dataset is "
                           "packed; an append adds samples to no split. Leave them out, or "
                           "pack the sources together")
    if setup["shape"] != SAMPLES:
        raise UsageProblem(f"--append {out}: {path} gives samples keyed by their index; "
                           "appending takes a folder of files")
    _check_compatible(old, source, setup, path, out)
    classes, ids = merged_classes(old.get("classes"), source.classes)
    duplicates = sorted(set(existing_keys(out, old)) & {s.key for s in source.samples()})
    if duplicates and on_duplicate == "error":
        raise UsageProblem(f"--append {out}: {len(duplicates):,} keys of {path} are already "
                           f"in the dataset ({names_text(duplicates)}); a key names one sample. "
                           "Rename or remove those files, or pass --on-duplicate skip to leave "
                           "them out (listed as skipped)")
    setup.update(fields={n: {k: v for k, v in spec.items() if k not in ("count", "bytes")}
                         for n, spec in old["fields"].items()},
                 classes=classes, key_dataset=old["key_dataset"],
                 generation=len(old.get("appends") or []) + 1,  # its file's name
                 dataset_name=out.name,  # an HDF5 generation file is named after it
                 transform=Relabel(setup["transform"], ids, set(duplicates)),
                 started_ns=time.time_ns())
    writer, tally = _start(out, source, setup, old, options, on_part)
    began = time.perf_counter()
    with disk_full_reported(writer.folder):
        try:
            write_samples(source, read_job, writer, tally, setup, options)
        except Resumable:
            raise
        except PackerError:
            shutil.rmtree(writer.folder, ignore_errors=True)
            raise
        manifest = merged_manifest(old, source, writer, tally, setup, options)
        seal(manifest)
        writer.finish(manifest)
        (writer.folder / PROGRESS_NAME).unlink(missing_ok=True)
        write_json_atomic(writer.folder / MANIFEST_NAME, manifest)
    format_module(old["format"]).publish(writer.folder, out)
    return {**manifest, "appended": manifest["appends"][-1],
            "seconds": time.perf_counter() - began}


def _check_compatible(old: dict, source, setup: dict, path, out: Path) -> None:
    """Refuse a source whose samples the dataset cannot hold as its own."""
    then = old.get("transform")
    now = setup["transform"].record() if setup["transform"] else None
    if then != now:
        raise UsageProblem(f"--append {out}: its images were packed with "
                           f"{_transform_text(then)}, and this append asks {_transform_text(now)}; "
                           "pass the dataset's --resize/--encode options")
    if old["source"].get("kind") != source.kind:
        raise UsageProblem(f"--append {out}: packed from {old['source'].get('kind')} input, "
                           f"and {path} is {source.kind} input; append a source of its kind")
    if ("cls" in old["fields"]) != ("cls" in setup["fields"]):
        labelled = "has class labels" if "cls" in old["fields"] else "has no class labels"
        raise UsageProblem(f"--append {out}: the dataset {labelled} and {path} does not match "
                           "it; lay out the new source as the dataset's was (class folders, "
                           "--labels, or --unlabelled)")
    differ = [name for name, spec in setup["fields"].items()
              if name not in old["fields"] or old["fields"][name]["dtype"] != spec["dtype"]
              or old["fields"][name].get("shape") != spec.get("shape")]
    if differ:
        raise UsageProblem(f"--append {out}: {path} has fields the dataset lacks or stores "
                           f"otherwise ({', '.join(differ)}; the dataset has "
                           f"{', '.join(old['fields'])}); append samples of the same fields")


def _transform_text(record: dict | None) -> str:
    if not record:
        return "no --resize/--encode"
    return " ".join(f"--{name.replace('_', '-')} {value}" for name, value in record.items()
                    if value is not None)


def merged_classes(old: list | None, new: list | None) -> tuple[list | None, list | None]:
    """The dataset's classes with the new source's added by name (a new one gets the
    next id), and each new class id's id in them."""
    if old is None and new is None:
        return None, None
    classes = list(old or [])
    for name in new or []:
        if name not in classes:
            classes.append(name)
    return classes, [classes.index(name) for name in new or []]


def existing_keys(out: Path, manifest: dict) -> list[str]:
    """Every key of the dataset, part by part: from the keys alone where the format can
    give them (its `part_keys`), else from its samples."""
    module = format_module(manifest["format"])
    if hasattr(module, "part_keys"):
        return [key for part in manifest["parts"] for key in module.part_keys(out, manifest,
                                                                              part)]
    return [sample[KEY] for part in manifest["parts"]
            for sample in module.read_part(out, manifest, part)]


def _stage(out: Path, work: Path) -> None:
    """The dataset's files in `work`: hard links to the files of a folder (no writer
    changes them); nothing of a one-file dataset (HDF5), whose append writes a file of
    its own."""
    work.mkdir(parents=True)
    if out.is_dir():
        for item in out.iterdir():
            if item.name not in _LEFT_OUT and item.is_file():
                os.link(item, work / item.name)


def _start(out: Path, source, setup: dict, old: dict, options: PackOptions, on_part):
    """The writer, resumed after the dataset's parts (or an interrupted append's)."""
    work = partial_path(out)
    progress_path = work / PROGRESS_NAME
    if work.exists() and not progress_path.exists() and _published(out, old, work):
        shutil.rmtree(work, ignore_errors=True)  # a run killed after its swap: it is done
    if work.exists() and options.resume and progress_path.exists():
        progress = json.loads(progress_path.read_text())
        check_unchanged(source, setup, progress, work)
        setup["started_ns"] = progress["started_ns"]
        parts, tally = progress["parts"], Tally(**progress["tally"])
    elif work.exists() and not options.resume:
        raise UsageProblem(f"{work} is left from an interrupted append; pass --resume to "
                           f"continue it, or delete it to start over ({out} is as before)")
    else:
        shutil.rmtree(work, ignore_errors=True)
        _stage(out, work)
        parts = old["parts"]
        tally = Tally(class_counts=[0] * len(setup["classes"] or []))
    module = format_module(old["format"])
    writer = module.WRITER(work, setup, *module.part_limits(options))
    writer.on_close = on_part
    restarted = writer.resume(parts)
    if restarted:
        shutil.rmtree(work, ignore_errors=True)
        raise PackerError(f"{work}: {restarted}; {out} is as before, append again")
    writing.save_progress(writer, tally, setup)
    return writer, tally


def _published(out: Path, dataset: dict, work: Path) -> bool:
    """Whether what `work` holds was already swapped in at `out`, the run killed before
    it removed `work`: the manifest there (this run's, or after an exchange the old
    dataset's) records no more appends than the dataset at `out` does."""
    try:
        staged = json.loads((work / MANIFEST_NAME).read_text())
    except (OSError, ValueError):
        return False
    return len(staged.get("appends") or []) <= len(dataset.get("appends") or [])


def merged_manifest(old: dict, source, writer, tally: Tally, setup: dict,
                    options: PackOptions) -> dict:
    """The dataset's manifest with this generation's samples, classes, skipped inputs
    and its entry in `appends`."""
    appends = old.get("appends") or []
    generation = len(appends) + 1
    skipped = [{**entry, "reason": without_addresses(entry["reason"]), "generation": generation}
               for entry in source.scan_skipped + tally.skipped]
    fields = {name: {**spec, "count": spec.get("count", 0) + tally.fields.get(name, {}).get(
        "count", 0), "bytes": spec.get("bytes", 0) + tally.fields.get(name, {}).get("bytes", 0)}
        for name, spec in old["fields"].items()}
    counts = None
    if setup["classes"] is not None:
        before = list(old.get("class_counts") or [])
        before += [0] * (len(setup["classes"]) - len(before))
        counts = [a + b for a, b in zip(before, tally.class_counts or [0] * len(before),
                                        strict=True)]
    now = datetime.now(UTC).isoformat(timespec="seconds")
    entry = {"generation": generation, "source": source.source_record(options)["source"]["path"],
             "created": now, "first": old["count"], "count": writer.count - old["count"],
             "skipped": len(skipped)}
    manifest = {key: value for key, value in old.items() if key not in (DIGEST_KEY, "seconds")}
    manifest.update(layout_version=LAYOUT_VERSION,  # it may name files an older one lacks
                    count=writer.count, parts=writer.parts, fields=fields,
                    classes=setup["classes"], class_counts=counts,
                    skipped=sorted(old["skipped"] + skipped, key=lambda e: e["path"]),
                    warnings=sorted(old.get("warnings", []) + tally.warnings,
                                    key=lambda e: e["path"]),
                    appends=[*appends, entry])
    return manifest


def append_text(manifest: dict) -> str:
    """`appended 10 samples to 90 (generation 1, from /data/new); dataset now 100
    samples; left out 2 already in it: ...`."""
    entry = manifest["appends"][-1]
    before = manifest["count"] - entry["count"]
    line = (f"appended {plural(entry['count'], 'sample')} to {before:,} (generation "
            f"{entry['generation']}, from {entry['source']}); dataset now "
            f"{manifest['count']:,} samples")
    duplicates = [e["path"] for e in manifest["skipped"] if e.get("generation")
                  == entry["generation"] and e["reason"] == DUPLICATE_REASON]
    if duplicates:
        line += f"; left out {len(duplicates):,} already in it: {names_text(duplicates)}"
    return line
