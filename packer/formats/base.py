"""What every format shares: samples, parts, digests.

A sample is a dict `{"__key__": str, FIELD: bytes, ..., "cls": int}`. A writer
receives samples in order and groups them into parts: a tar shard, or a block of
samples committed together in LMDB or HDF5. A closed part is durable on disk, so
an interrupted run resumes after the last closed part. Each part records its
sample count and `samples_sha256`, a digest of its samples that does not depend
on the format, so the same samples give the same digests in every format.
"""

import hashlib
from pathlib import Path

KEY = "__key__"
LAYOUT_VERSION = 1


def field_bytes(value) -> bytes:
    """The canonical bytes of a field value (an int class id as its decimal text)."""
    return str(value).encode() if isinstance(value, int) else bytes(value)


def update_digest(digest, sample: dict) -> None:
    digest.update(sample[KEY].encode() + b"\0")
    for name in sorted(k for k in sample if k != KEY):
        data = field_bytes(sample[name])
        digest.update(name.encode() + b"\0" + len(data).to_bytes(8, "little"))
        digest.update(data)


def sample_size(sample: dict) -> int:
    return sum(len(field_bytes(v)) for k, v in sample.items() if k != KEY)


class Writer:
    """Part bookkeeping for a format; subclasses encode and store samples.

    Subclasses implement `_encode(sample)`, `_encoded_size(encoded)`,
    `_store(encoded)`, `_seal_part(part)` (make the part durable and add
    format details to its record), `truncate(count)` and `finish(manifest)`.
    """

    def __init__(self, folder: Path, plan: dict, max_part_bytes: int, max_part_count: int):
        self.folder = folder
        self.plan = plan  # fields (name -> dtype), classes
        self.max_part_bytes = max_part_bytes
        self.max_part_count = max_part_count
        self.parts: list[dict] = []
        self.count = 0
        self._open_part: dict | None = None
        self._digest = None

    def add(self, sample: dict) -> dict | None:
        """Store one sample; returns the record of a part closed to make room, if any."""
        encoded = self._encode(sample)
        size = self._encoded_size(encoded)
        closed = None
        if self._open_part and (
            self._open_part["bytes"] + size > self.max_part_bytes
            or self._open_part["count"] >= self.max_part_count
        ):
            closed = self.close_part()
        if self._open_part is None:
            self._open_part = {"index": len(self.parts), "first": self.count,
                               "count": 0, "bytes": 0}
            self._digest = hashlib.sha256()
            self._begin_part(self._open_part)
        self._store(encoded)
        update_digest(self._digest, sample)
        self._open_part["count"] += 1
        self._open_part["bytes"] += size
        self.count += 1
        return closed

    def close_part(self) -> dict | None:
        """Make the open part durable; returns its record (None if no part is open)."""
        part, self._open_part = self._open_part, None
        if part is None:
            return None
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
