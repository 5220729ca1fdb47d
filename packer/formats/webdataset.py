"""WebDataset: POSIX tar shards, one member per field, in sample order.

    OUT/
      manifest.json
      shard-000000.tar     KEY.FIELD members: cats/img%2E001.jpg, cats/img%2E001.cls, ...
      shard-000001.tar

Members are written with fixed metadata (mtime 0, mode 0444, uid/gid 0), so the
same samples give byte-identical shards. A shard holds whole samples and is
closed before it would pass `--shard-size` bytes counted as written (headers and
padding included) or `--max-count` samples. `cls` is the class id as decimal text.
"""

import hashlib
import tarfile
from collections.abc import Iterator
from pathlib import Path

from packer.formats.base import KEY, Writer, field_bytes
from packer.keys import split_member

SHARD_NAME = "shard-{:06d}.tar"
_BLOCK = 512
_RECORD = 10240


def _member(name: str, data: bytes) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o444, 0
    header = info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
    return header + data + b"\0" * (-len(data) % _BLOCK)


class TarWriter(Writer):
    def _encode(self, sample: dict) -> bytes:
        key = sample[KEY]
        return b"".join(_member(f"{key}.{name}", field_bytes(value))
                        for name, value in sample.items() if name != KEY)

    def _encoded_size(self, encoded: bytes) -> int:
        return len(encoded)

    def _begin_part(self, part: dict) -> None:
        part["name"] = SHARD_NAME.format(part["index"])
        self._file = open(self.folder / part["name"], "wb")  # noqa: SIM115 (closed in _seal_part)
        self._file_digest = hashlib.sha256()

    def _store(self, encoded: bytes) -> None:
        self._file.write(encoded)
        self._file_digest.update(encoded)

    def _seal_part(self, part: dict) -> None:
        written = part["bytes"] + 2 * _BLOCK
        end = b"\0" * (2 * _BLOCK + (-written % _RECORD))
        self._file.write(end)
        self._file_digest.update(end)
        self._file.close()
        part["bytes"] += len(end)
        part["sha256"] = self._file_digest.hexdigest()

    def truncate(self, count: int) -> None:
        kept = {p["name"] for p in self.parts}
        for path in self.folder.glob("shard-*.tar"):
            if path.name not in kept:
                path.unlink()

    def finish(self, manifest: dict) -> None:
        pass


def read_shard(path: Path, int_fields: set[str]) -> Iterator[dict]:
    """The samples of one shard, in order; fields in `int_fields` become ints."""
    sample: dict = {}
    with tarfile.open(path, "r|", encoding="utf-8", errors="surrogateescape") as tar:
        for info in tar:
            if not info.isfile():
                continue
            key, name = split_member(info.name)
            if sample and sample[KEY] != key:
                yield sample
                sample = {}
            data = tar.extractfile(info).read()
            sample[KEY] = key
            sample[name] = int(data) if name in int_fields else data
    if sample:
        yield sample


def read_part(folder: Path, manifest: dict, part: dict) -> Iterator[dict]:
    int_fields = {n for n, f in manifest["fields"].items() if f["dtype"] == "int64"}
    yield from read_shard(folder / part["name"], int_fields)


WRITER = TarWriter
