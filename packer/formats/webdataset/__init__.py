"""WebDataset: POSIX tar shards, one member per field, in sample order.

    OUT/
      manifest.json
      shard-000000.tar     KEY.FIELD members: cats/img%2E001.jpg, cats/img%2E001.cls, ...
      shard-000000.idx     where each member is (packer's loader reads it; tar readers need not)
      shard-000001.tar

Members are written with fixed metadata (mtime 0, mode 0444, uid/gid 0), so the
same samples give byte-identical shards. A shard holds whole samples and is
closed before it would pass `--shard-size` bytes as written (headers, padding and
the end of the archive included) or `--max-count` samples; only a shard holding a
single larger sample passes the size. The end of the archive is two zero blocks,
then zeros up to a whole 10 KiB tar record where that fits in `--shard-size`.
`cls` is the class id as decimal text.
"""

import hashlib
import tarfile
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from packer.errors import DatasetError
from packer.formats import protocol
from packer.formats.base import Writer
from packer.formats.protocol import (
    no_file_manifest,
    no_layout_text,
    part_file_problems,
    publish_folder,
    sample_problems,
)
from packer.sample import KEY, SAMPLES, field_bytes, split_member

NAME = "webdataset"
PART = "shard"
SHAPES = (SAMPLES,)
PACK_OPTIONS = frozenset({"shard_size", "max_count"})
SAMPLE_DIGESTS = False  # each shard's sha256 covers its samples
PART_KEYS = (("name",), ("sha256",))
READ_ERRORS = (*protocol.READ_ERRORS, tarfile.TarError)
SHARD_NAME = "shard-{:06d}.tar"
publish = publish_folder
layout_text = no_layout_text
manifest_in_file = no_file_manifest
_BLOCK = 512
_RECORD = 10240


def _tarfile_header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, 0o444, 0
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


# The header of a short ASCII name differs from this template only in its name,
# size and checksum fields, so it is assembled from the template's other pieces.
_TEMPLATE = bytearray(_tarfile_header("", 0))
_TEMPLATE[148:156] = b" " * 8
_TEMPLATE_SUM = sum(_TEMPLATE) - sum(_TEMPLATE[124:136])
_IDS, _MTIME, _TAIL = bytes(_TEMPLATE[100:124]), bytes(_TEMPLATE[136:148]), bytes(_TEMPLATE[156:])
_NAME_FILL = [b"\0" * (100 - n) for n in range(101)]
_PADDING = [b"\0" * (-n % _BLOCK) for n in range(_BLOCK)]  # by size % 512


def _header(name: str, size: int) -> bytes:
    raw = name.encode("utf-8", "surrogateescape")
    if len(raw) > 100 or not raw.isascii() or size >= 8**11:
        return _tarfile_header(name, size)  # a PAX header carries the long or unicode name
    size_field = b"%011o\0" % size
    checksum = b"%06o\0 " % (_TEMPLATE_SUM + sum(raw) + sum(size_field))
    return b"".join((raw, _NAME_FILL[len(raw)], _IDS, size_field, _MTIME, checksum, _TAIL))


def part_limits(options) -> tuple[int, int]:
    """`--shard-size` and `--max-count` bound a shard."""
    return options.shard_size, options.max_count or 1 << 62


def encode(sample: dict) -> list[bytes]:
    """The sample's tar members, `KEY.FIELD` in field order: header, data and padding
    of each (joined once per run of samples, not once per sample)."""
    key, members = sample[KEY], []
    for name, value in sample.items():
        if name != KEY:
            data = value if type(value) is bytes else field_bytes(value)
            members += (_header(f"{key}.{name}", len(data)), data, _PADDING[len(data) % _BLOCK])
    return members


class TarWriter(Writer):
    """Writes shard-NNNNNN.tar files; a part is a shard.

    Runs of encoded samples are hashed and written by a thread (both release the GIL),
    straight from the workers' buffers, so the disk and the checksum overlap with
    encoding the next samples; at most two runs wait for it.
    """

    def __init__(self, folder: Path, setup: dict, max_part_bytes: int, max_part_count: int):
        super().__init__(folder, setup, max_part_bytes - 2 * _BLOCK, max_part_count)
        self.shard_size = max_part_bytes
        self._indexes: list[Future] = []  # each closed shard's index being saved

    def _begin_part(self, part: dict) -> None:
        part["name"] = SHARD_NAME.format(part["index"])
        self._file = open(self.folder / part["name"], "wb")  # noqa: SIM115 (closed in _seal_part)
        self._file_digest = hashlib.sha256()
        self._writes: deque[Future] = deque()
        if not hasattr(self, "_io"):
            self._io = ThreadPoolExecutor(1, thread_name_prefix="shard-writer")

    def _store(self, data) -> None:
        """Hand `data` (a run of samples, or the end of the archive) to the writing thread."""
        while len(self._writes) >= 2:
            self._writes.popleft().result()
        self._writes.append(self._io.submit(_hash_and_write, self._file_digest, self._file, data))

    def _store_run(self, data: memoryview, lengths: list[int]) -> None:
        self._store(data)

    def _seal_part(self, part: dict) -> None:
        record_fill = -(part["bytes"] + 2 * _BLOCK) % _RECORD
        room = self.shard_size - part["bytes"] - 2 * _BLOCK
        end = b"\0" * (2 * _BLOCK + min(record_fill, max(room, 0)))
        self._store(end)
        while self._writes:
            self._writes.popleft().result()
        self._file.close()
        part["bytes"] += len(end)
        part["sha256"] = self._file_digest.hexdigest()
        from packer.formats.webdataset.tarindex import save_index

        # on the writing thread, beside the next shard's encoding; `finish` waits for it
        self._indexes.append(self._io.submit(save_index, self.folder / part["name"],
                                             part["sha256"]))

    def truncate(self, count: int) -> None:
        kept = {p["name"] for p in self.parts}
        for path in self.folder.glob("shard-*.tar"):
            if path.name not in kept:
                path.unlink()
        for path in self.folder.glob("shard-*.idx*"):  # .idx, and .idx.partial
            if path.name.endswith(".partial") or path.name.split(".", 1)[0] + ".tar" not in kept:
                path.unlink()
        from packer.formats.webdataset.tarindex import index_path, save_index

        for part in self.parts:  # a kept shard whose index the interrupted run did not save
            if not index_path(self.folder / part["name"]).exists():
                save_index(self.folder / part["name"], part["sha256"])

    def finish(self, manifest: dict) -> None:
        if hasattr(self, "_io"):
            self._io.shutdown()
        for saved in self._indexes:  # an index that could not be written is an error
            saved.result()


def _hash_and_write(digest, file, data: bytes) -> None:
    digest.update(data)
    file.write(data)


def read_shard(stream, int_fields: set[str] = frozenset()) -> Iterator[dict]:
    """The samples of one shard (a path or a binary stream), in order, as webdataset
    groups them: consecutive members with the same key. `int_fields` become ints."""
    sample: dict = {}
    opened = tarfile.open(name=None if hasattr(stream, "read") else stream, mode="r|*",
                          fileobj=stream if hasattr(stream, "read") else None,
                          encoding="utf-8", errors="surrogateescape")
    with opened as tar:
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


def read_part(path: Path, manifest: dict, part: dict) -> Iterator[dict]:
    """A shard's samples through its index: a damaged header is an error naming its
    offset, where Python's tar reader would take it for the end of the archive."""
    from packer.formats.webdataset.tarindex import Reader

    return Reader([str(Path(path) / part["name"])], int_fields(manifest)).read_part(0)


def part_keys(path: Path, manifest: dict, part: dict) -> list[str]:
    """A shard's keys from its index (saved beside it, or its headers read): no member's
    data is read (what an append checks)."""
    from packer.formats.webdataset.tarindex import Reader

    return Reader([str(Path(path) / part["name"])], digests=[part.get("sha256")]).index(0).keys


def int_fields(manifest: dict) -> set[str]:
    """Fields stored as decimal text (`cls`); an int64 `.npy` field is an array."""
    return {n for n, f in manifest["fields"].items()
            if f["dtype"] == "int64" and not n.endswith(".npy")}


def data_files(path: Path, manifest: dict) -> list[Path]:
    return [Path(path) / part["name"] for part in manifest["parts"]]


def part_files(part: dict) -> list[str]:
    return [part["name"]]


def optional_part_files(part: dict) -> list[str]:
    """The shard's saved index: fetched with it from object storage where the store has
    one (a dataset packed before there were saved indexes has none)."""
    from packer.formats.webdataset.tarindex import index_path

    return [index_path(part["name"]).name]



def reader(path: Path, manifest: dict):
    """Random access through each shard's member index (built here, once, and shared by
    the workers); a shard whose sample count differs from the manifest is refused."""
    from packer.formats.webdataset.tarindex import Reader

    shards = Reader([str(p) for p in data_files(path, manifest)], int_fields(manifest),
                    [part.get("sha256") for part in manifest["parts"]])
    for index, part in enumerate(manifest["parts"]):
        if shards.count(index) != part["count"]:
            raise DatasetError(f"{shards.paths[index]}: {shards.count(index):,} samples, the "
                               f"manifest says {part['count']:,}")
    return shards


_UNLOCATED = ("{name}: every member reads as tar, so the change is in a file's bytes or in "
              "padding; tar shards keep no per-sample digests, so `packer verify DATASET "
              "--against SOURCE` is what names a changed file")


def verify_part(path: Path, manifest: dict, part: dict, name: str,
                compare) -> tuple[list[str], int]:
    """The shard's size and sha256, and every sample read through."""
    file_problems = part_file_problems(Path(path), part)
    problems, seen = sample_problems(read_part(path, manifest, part), part, name, compare,
                                     READ_ERRORS)
    if file_problems and not problems:
        problems = [_UNLOCATED.format(name=name)]
    return file_problems + problems + _index_problems(Path(path) / part["name"], part), seen


def _index_problems(shard: Path, part: dict) -> list[str]:
    """A saved index beside the shard that is not the shard's (the loader would pass
    over it and read the headers, more slowly)."""
    from packer.formats.webdataset.tarindex import index_path, saved_index

    if not index_path(shard).exists() or saved_index(str(shard), part.get("sha256")):
        return []
    return [f"{index_path(shard).name}: not the index of {shard.name} (damaged, or left by "
            "another pack); delete it (the loader then reads the shard's headers) or pack "
            "again"]


WRITER = TarWriter
