"""Writing a source's samples into a format's writer, by the source's shape: samples
read and encoded in chunks by the workers (or Ray's tasks) and stored in order, column
blocks stored whole, a dump's records copied whole; after each closed part,
`OUT.partial/progress.json` records what is durable (`save_progress`), so that
packer.packing.pipeline can resume after the last closed part."""

import secrets
import shutil
import time
from dataclasses import asdict

from packer.errors import BadInputError
from packer.manifest import write_json_atomic
from packer.packing.options import PackOptions
from packer.packing.parallel import engine_map
from packer.packing.space import check_room
from packer.packing.tally import Tally
from packer.packing.work import SPOOL_NAME, pack_chunk, unspool
from packer.sample import COLUMNS, RECORDS, SAMPLES
from packer.text import without_addresses

PROGRESS_NAME = "progress.json"
CHUNK = 512  # samples per unit of worker work
RECORDS_PART_BYTES = 64 << 20  # records of a dump copied per part (the RECORDS shape)


def save_progress(writer, tally: Tally, setup: dict) -> None:
    write_json_atomic(writer.folder / PROGRESS_NAME, {
        "fingerprint": setup["fingerprint"], "started_ns": setup["started_ns"],
        "options": setup["options"], "input": setup["input"],
        "parts": writer.parts, "tally": asdict(tally)}, sync=False)


def fail_on(entry: dict, root) -> None:
    raise BadInputError(f"{str(root).rstrip('/')}/{entry['path']}: "
                        f"{without_addresses(entry['reason'])} "
                        "(--on-error fail stops at the first bad input; the default, "
                        "--on-error skip, lists it in the manifest and goes on)")


class _NoBar:
    def update(self, count: int) -> None:
        pass

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        pass

    def close(self) -> None:
        pass


def _progress_bar(options: PackOptions, **settings):
    """A tqdm bar, or with -q one that shows nothing (and spares importing tqdm)."""
    if not options.progress:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(**settings)


def _make_room(writer, need: int) -> None:
    """Room for the next `need` bytes checked, and claimed where the writer must."""
    check_room(writer.folder, need)
    writer.reserve(need)


def _write_blocks(source, read_job, writer, tally: Tally, setup: dict,
                  options: PackOptions) -> None:
    """Column blocks straight into the writer: no per-sample step, one part per block."""
    def parts():
        for columns, crc32 in source.blocks(tally.next_input):
            _make_room(writer, sum(column.nbytes for column in columns.values()))
            rows = writer.add_block(columns, crc32)
            tally.add_block(columns)
            yield rows

    _whole_parts(parts(), source, writer, tally, setup, options)


def _write_records(source, read_job, writer, tally: Tally, setup: dict,
                   options: PackOptions) -> None:
    """A dump's records copied whole, one part of about RECORDS_PART_BYTES at a time."""
    import numpy as np  # only dumps come here

    stride = setup["records"]["stride"] or 1
    part_size = max(1, RECORDS_PART_BYTES // (source.record_dtype.itemsize * stride))
    sample_bytes = {name: np.dtype(spec["dtype"]).itemsize * int(np.prod(spec.get("shape", [])))
                    for name, spec in setup["fields"].items()}

    def parts():
        while tally.next_input < source.count:
            count = min(part_size, source.count - tally.next_input)
            _make_room(writer, count * stride * source.record_dtype.itemsize)
            tally.add_rows(count, sample_bytes, writer.add_records(source, count))
            yield count

    _whole_parts(parts(), source, writer, tally, setup, options)


def _whole_parts(parts, source, writer, tally: Tally, setup: dict,
                 options: PackOptions) -> None:
    """Parts the writer stores whole (`parts` yields each one's samples, once stored and
    counted): the progress saved after each."""
    bar = _progress_bar(options, total=source.count, initial=tally.next_input, unit="sample",
                        desc=f"packing to {options.to}", unit_scale=True)
    for rows in parts:
        tally.next_input += rows
        save_progress(writer, tally, setup)
        bar.update(rows)
    bar.close()


def write_samples(source, read_job, writer, tally: Tally, setup: dict,
                   options: PackOptions) -> None:
    """Samples read and encoded in the workers (or in this process), stored in order."""
    start, total = tally.next_input, source.count
    for stale in writer.folder.glob(SPOOL_NAME + "*"):  # an interrupted run's
        shutil.rmtree(stale, ignore_errors=True)
    spool = writer.folder / f"{SPOOL_NAME}-{secrets.token_hex(6)}"  # this run's only
    spool.mkdir()
    spooled = options.engine == "local" and options.workers > 1  # Ray's tasks return theirs
    jobs = ((read_job, job, options.to, str(spool / f"{n:08d}") if spooled else None,
             setup["transform"], setup["logged"])
            for n, job in enumerate(source.jobs(start, CHUNK, options.check)))
    bar = _progress_bar(options, total=total, initial=start, unit="sample",
                        desc=f"packing to {options.to}", dynamic_ncols=True)
    with engine_map(options.engine, options.workers, options.address) as parallel_map:
        _store_chunks(map(unspool, parallel_map(pack_chunk, jobs)), source, writer, tally,
                      setup, options, bar)
    bar.close()
    writer.close_part()
    spool.rmdir()
    tally.next_input = total


def _store_chunks(chunks, source, writer, tally: Tally, setup: dict, options: PackOptions,
                  bar) -> None:
    """The encoded chunks, in order, into the writer; the progress saved at each part."""
    began, first_bytes = time.perf_counter(), tally.input_bytes
    index = tally.next_input
    for chunk in chunks:
        if chunk.skipped and options.on_error == "fail":
            fail_on(next(iter(chunk.skipped.values()))[0], source.path)
        if setup["log"] is not None:
            chunk = setup["log"].admit(chunk)
        _make_room(writer, len(chunk.blob) + writer.pending_bytes())
        stored = 0
        while (stored := writer.add_chunk(chunk, stored)) < len(chunk.lengths):
            next_input = index + chunk.good_positions()[stored]
            save_progress(writer, tally.upto(chunk, stored, next_input), setup)
        tally.add_chunk(chunk)
        index += chunk.count
        bar.update(chunk.count)
        rate = (tally.input_bytes - first_bytes) / 1e6 / (time.perf_counter() - began)
        bar.set_postfix_str(f"{rate:.1f} MB/s", refresh=False)


WRITE = {SAMPLES: write_samples, COLUMNS: _write_blocks, RECORDS: _write_records}
