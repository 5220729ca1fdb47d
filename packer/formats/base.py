"""What every format shares: samples, encoded samples, parts, digests.

A sample is a dict `{"__key__": str, FIELD: bytes, ..., "cls": int}`. The packing
workers encode runs of samples with the format's `encode(sample)` (the sample's
bytes as a list of pieces, joined once per run) into a `Chunk`; the writer
receives the samples in order and groups them into parts: a tar shard, a TFRecord
file, or a block of samples committed together in LMDB or HDF5. A closed part is
durable on disk, so an interrupted run resumes after the last closed part.
Each part records its sample count and a checksum: a part that is a file (a tar
shard, a TFRecord file) the sha256 of that file; an LMDB or HDF5 block
`samples_sha256`, the sha256 of its samples' digests (`sample_digest`), which does
not depend on the format.
"""

import hashlib
import os
from bisect import bisect_right
from collections.abc import Iterator
from itertools import accumulate
from pathlib import Path
from typing import NamedTuple

from packer.sample import KEY, sample_digest, value_size


class CannotResume(Exception):
    """Raised by `truncate` when what an interrupted run wrote cannot be continued;
    the writer has started over from nothing."""


class Chunk(NamedTuple):
    """A worker's output for a run of samples, pickled once: the encoded samples
    back to back, per good sample its length, digest, field sizes and label, and
    the run's field totals (so that the writing process does no per-sample work)."""

    blob: bytes
    lengths: list[int]
    digests: bytes  # 32 bytes per sample, or empty where the format keeps none
    field_sizes: list[tuple]  # ((field, bytes), ...) per good sample
    labels: list
    totals: dict[str, list[int]]  # field -> [samples, bytes]
    skipped: dict[int, list]  # position in the run -> skip entries
    count: int  # samples in the run, skipped ones included
    spool: str | None = None  # a file holding `blob`, when it crossed from a worker
    spool_crc: int = 0  # the CRC-32 of the spool file's bytes
    warnings: dict | None = None  # position in the run -> warnings of a good sample's inputs
    keys: tuple = ()  # per good sample, where kept (splits, --dedupe, KEYS_BESIDE_PARTS)
    contents: bytes = b""  # ... and its content_digest, 32 bytes each

    def good_positions(self) -> list[int]:
        """The position in the run of each good sample."""
        if not self.skipped:
            return list(range(self.count))
        return [p for p in range(self.count) if p not in self.skipped]

    def without(self, dropped: dict[int, list]) -> "Chunk":
        """The chunk less the good samples numbered in `dropped` (good sample -> the skip
        entries that now list it)."""
        keep = [i for i in range(len(self.lengths)) if i not in dropped]
        offsets = [0, *accumulate(self.lengths)]
        blob = memoryview(self.blob)
        totals: dict[str, list[int]] = {}
        for i in keep:
            for name, size in self.field_sizes[i]:
                total = totals.setdefault(name, [0, 0])
                total[0] += 1
                total[1] += size
        positions = self.good_positions()
        return self._replace(
            blob=b"".join(blob[offsets[i]:offsets[i + 1]] for i in keep),
            lengths=[self.lengths[i] for i in keep],
            digests=b"".join(self.digests[32 * i:32 * i + 32] for i in keep),
            field_sizes=[self.field_sizes[i] for i in keep],
            labels=[self.labels[i] for i in keep], totals=totals,
            skipped={**self.skipped, **{positions[i]: entries for i, entries in dropped.items()}},
            warnings={p: w for p, w in (self.warnings or {}).items()
                      if p not in {positions[i] for i in dropped}},
            keys=tuple(self.keys[i] for i in keep),
            contents=b"".join(self.contents[32 * i:32 * i + 32] for i in keep))


def encode_chunk(outcomes: list[tuple[dict | None, list]], module) -> Chunk:
    """Encode a run of read samples with a format `module`: each outcome is a sample
    and the warnings of its inputs, or None and the skip entries of its inputs."""
    chunk = Chunk(b"", [], b"", [], [], {}, {}, len(outcomes), warnings={}, keys=[])
    encoded, digests = [], []
    for position, (sample, notes) in enumerate(outcomes):
        if sample is None:
            chunk.skipped[position] = notes
            continue
        if notes:
            chunk.warnings[position] = notes
        pieces = module.encode(sample)
        encoded += pieces
        chunk.lengths.append(sum(map(len, pieces)))
        if module.SAMPLE_DIGESTS:
            digests.append(sample_digest(sample))
        sizes = tuple((k, value_size(v)) for k, v in sample.items() if k != KEY)
        chunk.field_sizes.append(sizes)
        for name, size in sizes:
            total = chunk.totals.setdefault(name, [0, 0])
            total[0] += 1
            total[1] += size
        chunk.labels.append(sample.get("cls"))
        if getattr(module, "KEYS_BESIDE_PARTS", False):
            chunk.keys.append(sample[KEY])
    return chunk._replace(blob=b"".join(encoded), digests=b"".join(digests),
                          keys=tuple(chunk.keys))


class Writer:
    """Part bookkeeping for a format; subclasses store encoded samples.

    Subclasses implement `_store(data)` (or `_store_run`), `_seal_part(part)` (make the
    part durable and add format details to its record), `truncate(count)` and
    `finish(manifest)`.
    """

    def __init__(self, folder: Path, setup: dict, max_part_bytes: int, max_part_count: int):
        self.folder = folder
        self.setup = setup  # fields (name -> dtype), classes, input_bytes
        self.max_part_bytes = max_part_bytes
        self.max_part_count = max_part_count
        self.parts: list[dict] = []
        self.count = 0
        self.on_close = None  # called with (folder, part record) when a part is durable
        self._open_part: dict | None = None
        self._digest = None

    def add_chunk(self, chunk: Chunk, start: int = 0) -> int:
        """Store the chunk's good samples from `start` on while they fit the open part
        (a new part takes at least one). Where one does not fit, the part is closed and
        that sample's index is returned, so the caller can record the progress and call
        again from there; otherwise the number of good samples."""
        lengths = chunk.lengths
        if start == len(lengths):
            return start
        part = self._open_part or self._new_part(bool(chunk.digests))
        offsets = [0, *accumulate(lengths)]
        fit_bytes = bisect_right(offsets, offsets[start] + self.max_part_bytes - part["bytes"]) - 1
        stop = min(len(lengths), start + self.max_part_count - part["count"], fit_bytes)
        if part["count"] == 0:
            stop = max(stop, start + 1)
        if stop > start:
            self._store_run(memoryview(chunk.blob)[offsets[start]:offsets[stop]],
                            lengths[start:stop])
            self._store_keys(chunk.keys[start:stop])
            if self._digest is not None:
                self._digest.update(chunk.digests[32 * start:32 * stop])
            part["count"] += stop - start
            part["bytes"] += offsets[stop] - offsets[start]
            self.count += stop - start
        if stop < len(lengths):
            self.close_part()
        return stop

    def _new_part(self, sample_digests: bool) -> dict:
        part = self._open_part = {"index": len(self.parts), "first": self.count,
                                  "count": 0, "bytes": 0}
        self._digest = hashlib.sha256() if sample_digests else None
        self._begin_part(part)
        return part

    def _store_run(self, data: memoryview, lengths: list[int]) -> None:
        """Store encoded samples that lie back to back in `data`, one by one."""
        offset = 0
        for length in lengths:
            self._store(data[offset:offset + length])
            offset += length

    def close_part(self) -> dict | None:
        """Make the open part durable; returns its record (None if no part is open)."""
        part, self._open_part = self._open_part, None
        if part is None:
            return None
        if self._digest is not None:
            part["samples_sha256"] = self._digest.hexdigest()
        self._seal_part(part)
        self.parts.append(part)
        if self.on_close is not None:
            self.on_close(self.folder, part)
        return part

    def resume(self, parts: list[dict]) -> str | None:
        """Continue after `parts`, the closed parts of an interrupted run; returns why
        the writer started over from nothing instead, where it had to."""
        self.parts = list(parts)
        self.count = sum(p["count"] for p in parts)
        try:
            self.truncate(self.count)
        except CannotResume as err:
            self.parts, self.count = [], 0
            return str(err)
        return None

    def _begin_part(self, part: dict) -> None:
        pass

    def _store_keys(self, keys: tuple) -> None:
        """The keys of the samples just stored, where the chunk has them (a format that
        keeps them beside its parts, `KEYS_BESIDE_PARTS`; a split or --dedupe)."""

    def reserve(self, nbytes: int) -> None:
        """Claim disk space for the next `nbytes` to be written, before writing them: a
        writer whose library cannot fail cleanly on a full disk mid-write claims it for
        real (an OSError when there is no room)."""

    def pending_bytes(self) -> int:
        """Disk space the open part will still take when it is closed (a writer that
        keeps a part in memory until then says how much)."""
        return 0


class PartFiles:
    """Read-only descriptors of part files (`self.paths[part]`), opened lazily in the
    process that reads, once each: none crosses a fork or a pickle. `_opened(part, fd)`
    may check a file when it is first opened."""

    _fds: dict[int, int] = {}
    _pid: int | None = None

    def _fd(self, part: int) -> int:
        if self._pid != os.getpid():
            self._fds, self._pid = {}, os.getpid()
        if part not in self._fds:
            self._fds[part] = os.open(self.paths[part], os.O_RDONLY)
            self._opened(part, self._fds[part])
        return self._fds[part]

    def _opened(self, part: int, fd: int) -> None:
        pass

    def close(self) -> None:
        if self._pid == os.getpid():
            for fd in self._fds.values():
                os.close(fd)
        self._fds = {}

    def __getstate__(self):
        return {**self.__dict__, "_fds": {}, "_pid": None}


class ProcessReader:
    """A reader of runs of samples (`read(part, start, count)`) through a handle (an
    open file or environment) opened lazily, once per process: a forked worker opens
    its own, and a pickled reader carries none. Subclasses give `_open_handle`."""

    _handle = None
    _pid = None

    def _open_handle(self, inherited):
        """A new handle for this process; `inherited` is the parent's, or None."""
        raise NotImplementedError

    def handle(self):
        if self._pid != os.getpid():
            self._handle = self._open_handle(self._handle)
            self._pid = os.getpid()
        return self._handle

    def __getstate__(self):  # a handle never travels to another process
        return {**self.__dict__, "_handle": None, "_pid": None}

    def close(self) -> None:
        if self._handle is not None and self._pid == os.getpid():
            self._handle.close()
        self._handle = self._pid = None

    def read_part(self, part: dict, run: int = 1024) -> Iterator[dict]:
        """Every sample of a part, `run` at a time; the handle is closed at the end."""
        try:
            for start in range(0, part["count"], run):
                yield from self.read(part["index"], start, min(run, part["count"] - start))
        finally:
            self.close()
