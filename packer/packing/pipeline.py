"""Packing: a scanned source, read in parallel, written by a format writer.

The output is written to `OUT.partial` and renamed to `OUT` only when complete.
After each closed part, `OUT.partial/progress.json` records what is durable
(parts, skipped inputs, counts), so `--resume` continues after the last closed
part and ends with exactly what an uninterrupted run writes; with the options and
the input's sample count, so a refused resume can say what changed.
"""

import hashlib
import json
import os
import shutil
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from packer.errors import PackerError, Resumable, UsageProblem
from packer.formats import format_module
from packer.formats.manifests import is_packed
from packer.manifest import MANIFEST_NAME, partial_path, seal, write_json_atomic
from packer.packing import writing
from packer.packing.lock import output_lock
from packer.packing.options import PackOptions, for_source
from packer.packing.ray_engine import check_cluster
from packer.packing.resume import check_unchanged
from packer.packing.sample_log import SampleLog
from packer.packing.space import disk_full_reported
from packer.packing.splits import check_split_options, check_split_source, splits_entry
from packer.packing.tally import Tally, nothing_packed
from packer.sample import COLUMNS, LAYOUT_VERSION, RECORDS, SAMPLES
from packer.sources import claimed, open_source
from packer.storage.url import is_s3
from packer.text import without_addresses
from packer.version import __version__


def check_paths(source, out: Path, options: PackOptions) -> None:
    claimed(source, options.spec)
    options.transform()  # a bad --resize or --encode is refused before anything is read
    check_split_options(options)
    if not is_s3(source):  # a local output is never inside a bucket, nor holds one
        src, dst = Path(source).resolve(), out.resolve()
        if dst.is_relative_to(src):
            raise UsageProblem(f"-o {out} is inside the input {source}; write the output "
                               "elsewhere, or it would be packed into itself")
        if src.is_relative_to(dst):
            raise UsageProblem(f"-o {out} contains the input {source}; choose another "
                               "output")
    if out.exists() and not options.overwrite:
        raise UsageProblem(f"{out} already exists; pass --overwrite to replace it")
    if out.is_file() and not is_packed(out):
        raise UsageProblem(f"-o {out} is a file, and not a packed dataset; refusing to "
                           "replace it, choose another -o")
    if out.is_dir() and any(out.iterdir()) and not is_packed(out):
        raise UsageProblem(f"{out} exists and is not a packed dataset; refusing to replace "
                           "it, choose another -o")


def _make_parents(out: Path) -> None:
    """The folders above `out`, made where missing (as `unpack -o` and `train fit --out`
    make theirs)."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise PackerError(f"-o {out}: cannot make the folder {out.parent} "
                          f"({err.strerror}); choose an -o in a folder you can write to") from None


def _shape(source, module, logged: bool) -> str:
    """The first of the shapes the source offers that the format's writer takes (samples
    one by one where the pack keeps a log of them)."""
    if logged:
        return SAMPLES
    return next(shape for shape in (*source.SHAPES, SAMPLES) if shape in module.SHAPES)


def _logged(source, options: PackOptions) -> bool:
    """Whether the pack keeps its samples' keys and contents: to split them, or to drop
    duplicates."""
    return bool(options.split or options.dedupe or getattr(source, "split_folders", None))


def _setup(source, options: PackOptions) -> dict:
    """What the writer writes (fields, classes, the shape of the samples and what it
    needs) and what a resumed run must match (the input and the options that shape
    this format)."""
    logged = _logged(source, options)
    shape = _shape(source, format_module(options.to), logged)
    fingerprint = hashlib.sha256(json.dumps([source.fingerprint, options.shaping()],
                                            default=str).encode()).hexdigest()
    indexed = shape != SAMPLES  # samples keyed by their index: the reader makes the keys
    transform = options.transform()
    fields = transform.fields(source.field_specs) if transform else source.field_specs
    return {"fields": fields, "classes": source.classes, "transform": transform,
            "input_bytes": source.input_bytes, "fingerprint": fingerprint,
            # kept in progress.json to say what changed when a --resume is refused
            "options": json.loads(json.dumps(options.recorded(), default=str)),
            "input": {"fingerprint": source.fingerprint, "samples": source.count},
            "shape": shape, "implicit_keys": indexed,
            "key_dataset": None if indexed else source.key_dataset, "attrs": source.attrs,
            "records": source.records_layout() if shape == RECORDS else None, "logged": logged,
            "record_dtype": source.record_dtype if shape == RECORDS else None}


def _start(out: Path, source, setup: dict, options: PackOptions, on_part=None):
    """The writer (fresh or resumed) and the tally to continue from; `on_part(folder,
    part)` is called as each part closes."""
    work = partial_path(out)
    progress_path = work / writing.PROGRESS_NAME
    if work.exists() and options.resume and progress_path.exists():
        progress = json.loads(progress_path.read_text())
        check_unchanged(source, setup, progress, work)
        setup["started_ns"] = progress.get("started_ns", setup["started_ns"])
    elif work.exists() and not (options.resume or options.overwrite):
        raise UsageProblem(f"{work} is left from an interrupted run; pass --resume to "
                           "continue it or --overwrite to start over")
    else:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        progress = None
    module = format_module(options.to)
    writer = module.WRITER(work, setup, *module.part_limits(options))
    tally = Tally(class_counts=[0] * len(setup["classes"] or []))
    restarted = progress and writer.resume(progress["parts"])
    if restarted:
        sys.stderr.write(f"Warning: {work}: {restarted}; packing again from the start.\n")
    elif progress:
        tally = Tally(**progress["tally"])
    setup["log"] = SampleLog(work, options.dedupe) if setup["logged"] else None
    writer.on_close = _on_close(setup["log"], on_part)
    if setup["log"]:
        setup["log"].resume(writer.parts)
    return writer, tally


def _on_close(log: SampleLog | None, on_part):
    """What runs as each part closes: the log of its samples written, then `on_part`."""
    if log is None:
        return on_part

    def closed(folder: Path, part: dict) -> None:
        log.part_closed(part)
        if on_part is not None:
            on_part(folder, part)

    return closed


def _manifest(source, writer, tally: Tally, setup: dict, options: PackOptions) -> dict:
    fields = {name: {**spec, **tally.fields.get(name, {"count": 0, "bytes": 0})}
              for name, spec in setup["fields"].items()}
    return {
        "format": options.to, "layout_version": LAYOUT_VERSION, "tool": f"packer {__version__}",
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "count": writer.count, "fields": fields,
        "classes": source.classes, "class_counts": tally.class_counts if source.classes else None,
        "parts": writer.parts,
        "key_dataset": setup["key_dataset"],
        **({"records": setup["records"]} if setup["records"] else {}),
        "options": options.recorded(),
        **({"transform": setup["transform"].record()} if setup["transform"] else {}),
        "skipped": sorted(({**entry, "reason": without_addresses(entry["reason"])}
                           for entry in source.scan_skipped + tally.skipped),
                          key=lambda e: e["path"]),
        "warnings": sorted(tally.warnings, key=lambda e: e["path"]),
        "ignored": [],
        **source.source_record(options),
    }


def pack_local(path, out, options: PackOptions, on_part=None, record: Path | None = None) -> dict:
    """Pack `path` (a folder of files, or with --spec a binary dump or a folder of
    them, or a table; or an s3:// prefix of files) into the local path `out`; returns
    the manifest. `on_part(folder, part)` is called as each part closes (its files are
    complete). `record`: where a staged pack keeps its progress record once complete
    (for `check_same_input`; not for an s3:// object, packed from a copy)."""
    path, out = path if is_s3(path) else Path(path), Path(out)
    options = for_source(path, options)
    check_paths(path, out, options)
    _make_parents(out)
    if options.engine == "ray":
        check_cluster(options.address)  # before the scan: an error now, not after it
    with output_lock(out):
        if is_s3(path):
            from packer.storage.fetch import names_object

            if names_object(path):
                return _pack_copy(path, out, options, on_part)
        return _pack_locked(path, out, options, on_part, record=record)


def _pack_copy(url: str, out: Path, options: PackOptions, on_part) -> dict:
    """Pack the object at `url` (a table, a dump) from its checked copy in the cache,
    kept for --resume until the pack is complete."""
    from packer.storage.fetch import fetch_object, remove_copy

    copy = fetch_object(url)
    manifest = _pack_locked(copy, out, options, on_part, shown=url)
    remove_copy(copy)
    return manifest


def _pack_locked(path, out: Path, options: PackOptions, on_part, shown=None,
                 record: Path | None = None) -> dict:
    """Pack `path` (named `shown` in the manifest when given) into `out`."""
    if out.exists() and not options.overwrite:  # written while this run waited to start
        raise UsageProblem(f"{out} already exists; pass --overwrite to replace it")
    started_ns = time.time_ns()
    source, read_job = open_source(path, options)
    check_split_source(source, options)
    if source.scan_skipped and options.on_error == "fail":
        writing.fail_on(source.scan_skipped[0], path)
    if not source.count:
        raise PackerError(nothing_packed(path, source.scan_skipped, source.unmatched_labels))
    setup = {**_setup(source, options), "started_ns": started_ns}
    if options.engine == "ray" and setup["shape"] != SAMPLES:
        raise UsageProblem(f"--engine ray: {path} goes into --to {options.to} as whole "
                           f"{'column blocks' if setup['shape'] == COLUMNS else 'records'} "
                           "copied in this process, with no per-sample work to share over a "
                           "cluster; leave out --engine ray (the copy runs at disk speed)")
    writer, tally = _start(out, source, setup, options, on_part)
    began = time.perf_counter()
    with disk_full_reported(writer.folder):
        try:
            writing.WRITE[setup["shape"]](source, read_job, writer, tally, setup, options)
        except Resumable:  # the partial output is kept for --resume
            raise
        except PackerError:
            shutil.rmtree(writer.folder, ignore_errors=True)
            raise
        if not writer.count:
            shutil.rmtree(writer.folder, ignore_errors=True)
            raise PackerError(nothing_packed(path, source.scan_skipped + tally.skipped))
        source.input_bytes = source.input_bytes or tally.input_bytes  # a folder's, known now
        manifest = _manifest(source, writer, tally, setup, options)
        if setup["log"] is not None:
            splits = splits_entry(*setup["log"].entries(writer.parts), source.classes,
                                  options, getattr(source, "split_folders", None))
            manifest.update({"splits": splits} if splits else {})
        manifest["source"]["path"] = shown or manifest["source"]["path"]
        seal(manifest)
        writer.finish(manifest)
        if record is not None:
            writing.save_progress(writer, tally, setup)
            os.replace(writer.folder / writing.PROGRESS_NAME, record)
        (writer.folder / writing.PROGRESS_NAME).unlink(missing_ok=True)
        if setup["log"] is not None:  # only now: a resume before this needs it
            setup["log"].remove()
        write_json_atomic(writer.folder / MANIFEST_NAME, manifest)
    format_module(options.to).publish(writer.folder, out)
    manifest["seconds"] = time.perf_counter() - began
    return manifest


def check_same_input(path, options: PackOptions, record: dict, shown: str) -> None:
    """Refuse to go on with the complete pack `record` describes when its input changed
    since (the listing, or a file modified after the pack began), naming `shown`."""
    options = for_source(path, options)
    source, _ = open_source(path, options)
    check_unchanged(source, _setup(source, options), record, shown)
