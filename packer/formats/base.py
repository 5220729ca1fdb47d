"""What every format shares: samples, encoded samples, parts, digests.

A sample is a dict `{"__key__": str, FIELD: bytes, ..., "cls": int}`. The packing
workers encode runs of samples with the format's `encode(sample) -> bytes` into a
`Chunk`; the writer receives the samples in order and groups them into parts: a
tar shard, or a block of samples committed together in LMDB or HDF5. A closed part
is durable on disk, so an interrupted run resumes after the last closed part.
Each part records its sample count and a checksum: a tar shard the sha256 of its
file; an LMDB or HDF5 block `samples_sha256`, the sha256 of its samples' digests
(`sample_digest`), which does not depend on the format.
"""

import hashlib
import io
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np

KEY = "__key__"
LAYOUT_VERSION = 1


class Encoded(NamedTuple):
    data: bytes | memoryview  # the format's encoding of the sample
    size: int  # bytes the sample adds to its part
    digest: bytes | None  # sample_digest(sample), where the format records them
    field_sizes: tuple  # ((field, bytes), ...) for the manifest's field counts
    label: int | None


class Chunk(NamedTuple):
    """A worker's output for a run of samples, pickled once: the encoded samples
    back to back, and per good sample its length, digest, field sizes and label."""

    blob: bytes
    lengths: list[int]
    digests: bytes  # 32 bytes per sample, or empty where the format keeps none
    field_sizes: list[tuple]
    labels: list
    skipped: dict[int, list]  # position in the run -> skip entries
    count: int  # samples in the run, skipped ones included
    spool: str | None = None  # a file holding `blob`, when it crossed from a worker


def field_bytes(value) -> bytes:
    """The canonical bytes of a field value: an int as its decimal text (a class id),
    an array as a .npy file."""
    if isinstance(value, int):
        return str(value).encode()
    if isinstance(value, np.ndarray):
        out = io.BytesIO()
        np.save(out, value, allow_pickle=False)
        return out.getvalue()
    return bytes(value)


def value_size(value) -> int:
    """Bytes of data a field value holds (0 for a class id)."""
    if isinstance(value, int):
        return 0
    return value.nbytes if isinstance(value, np.ndarray) else len(value)


def msgpack_default(value):
    """Lets msgpack carry arrays, as .npy bytes."""
    if isinstance(value, np.ndarray):
        return field_bytes(value)
    raise TypeError(f"cannot encode a {type(value).__name__}")


def sample_digest(sample: dict) -> bytes:
    """sha256 of the key, then each field's name, length and bytes in name order."""
    parts = [sample[KEY].encode(), b"\0"]
    for name in sorted(k for k in sample if k != KEY):
        data = field_bytes(sample[name])
        parts += (name.encode(), b"\0", len(data).to_bytes(8, "little"), data)
    return hashlib.sha256(b"".join(parts)).digest()


def encode_chunk(outcomes: list[tuple[dict | None, list]], module) -> Chunk:
    """Encode a run of read samples (or their skip entries) with a format `module`."""
    chunk = Chunk(b"", [], b"", [], [], {}, len(outcomes))
    encoded, digests = [], []
    for position, (sample, skipped) in enumerate(outcomes):
        if sample is None:
            chunk.skipped[position] = skipped
            continue
        data = module.encode(sample)
        encoded.append(data)
        chunk.lengths.append(len(data))
        if module.SAMPLE_DIGESTS:
            digests.append(sample_digest(sample))
        chunk.field_sizes.append(tuple((k, value_size(v)) for k, v in sample.items() if k != KEY))
        chunk.labels.append(sample.get("cls"))
    return chunk._replace(blob=b"".join(encoded), digests=b"".join(digests))


def chunk_items(chunk: Chunk) -> Iterator[tuple[Encoded | None, list]]:
    """(encoded sample, []) or (None, skip entries) for each sample of the run."""
    view, offset, good = memoryview(chunk.blob), 0, 0
    for position in range(chunk.count):
        if position in chunk.skipped:
            yield None, chunk.skipped[position]
            continue
        size = chunk.lengths[good]
        digest = chunk.digests[32 * good:32 * good + 32] or None
        yield Encoded(view[offset:offset + size], size, digest, chunk.field_sizes[good],
                      chunk.labels[good]), []
        offset += size
        good += 1


class Writer:
    """Part bookkeeping for a format; subclasses store encoded samples.

    Subclasses implement `_store(data)`, `_seal_part(part)` (make the part durable
    and add format details to its record), `truncate(count)` and `finish(manifest)`.
    """

    def __init__(self, folder: Path, plan: dict, max_part_bytes: int, max_part_count: int):
        self.folder = folder
        self.plan = plan  # fields (name -> dtype), classes, input_bytes
        self.max_part_bytes = max_part_bytes
        self.max_part_count = max_part_count
        self.parts: list[dict] = []
        self.count = 0
        self._open_part: dict | None = None
        self._digest = None

    def add(self, item: Encoded) -> dict | None:
        """Store one sample; returns the record of a part closed to make room, if any."""
        part, closed = self._open_part, None
        if part and (part["bytes"] + item.size > self.max_part_bytes
                     or part["count"] >= self.max_part_count):
            closed = self.close_part()
            part = None
        if part is None:
            part = self._open_part = {"index": len(self.parts), "first": self.count,
                                      "count": 0, "bytes": 0}
            self._digest = hashlib.sha256() if item.digest else None
            self._begin_part(part)
        self._store(item.data)
        if self._digest is not None:
            self._digest.update(item.digest)
        part["count"] += 1
        part["bytes"] += item.size
        self.count += 1
        return closed

    def close_part(self) -> dict | None:
        """Make the open part durable; returns its record (None if no part is open)."""
        part, self._open_part = self._open_part, None
        if part is None:
            return None
        if self._digest is not None:
            part["samples_sha256"] = self._digest.hexdigest()
        self._seal_part(part)
        self.parts.append(part)
        return part

    def resume(self, parts: list[dict]) -> None:
        """Continue after `parts`, the closed parts of an interrupted run."""
        self.parts = list(parts)
        self.count = sum(p["count"] for p in parts)
        self.truncate(self.count)

    def _begin_part(self, part: dict) -> None:
        pass
