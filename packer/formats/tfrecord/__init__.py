"""TFRecord: parts of `tf.train.Example` records, each with an index of its records.

    OUT/
      manifest.json
      part-000000.tfrecord    records back to back, sample order, nothing between them
      part-000000.tfindex     one line per record: "OFFSET SIZE\\n", as the `tfrecord`
                              package's tfrecord2idx writes it (its readers take it)
      part-000000.tfkeys      the part's keys in record order, a JSON array (what an
                              append checks; a part packed without one is read whole)
      part-000001.tfrecord, part-000001.tfindex, part-000001.tfkeys, ...

    a record (little-endian)                         its Example's features
    +--------+------------+---------------+------------+   __key__  bytes_list  the key (utf-8)
    | uint64 | uint32     | Example       | uint32     |   jpg ...  bytes_list  the file's bytes
    | length | masked CRC | (length bytes)| masked CRC |   cls      int64_list  a class id
    |        | of length  |               | of data    |   npy      float_list  a float32 array
    +--------+------------+---------------+------------+            (C order; its shape in the
     0        8            12              12 + length               manifest's fields)

A field holding bytes (an image, json, txt, a .cls file) is a bytes_list of one value,
an int class id an int64_list, a float32 array a float_list; any other array keeps its
.npy bytes in a bytes_list. A part holds whole samples and is closed before it would
pass `--shard-size` bytes or `--max-count` samples (only a part holding a single larger
sample passes the size). The manifest gives each part's sample count, size and sha256.
The reader checks both CRCs of every record it reads and that every record lies where
the index says; a damaged or cut record raises `TFRecordError` naming the file and the
record's byte offset.
"""

import hashlib
import json
import os
import struct
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import accumulate
from pathlib import Path
from typing import NoReturn

import numpy as np

from packer.errors import DatasetError
from packer.formats import protocol
from packer.formats.base import PartFiles, Writer
from packer.formats.protocol import (
    no_file_manifest,
    no_layout_text,
    part_file_problems,
    publish_folder,
    sample_problems,
)
from packer.formats.readahead import file_range
from packer.formats.tfrecord.codec import (
    BYTES_LIST,
    FLOAT_LIST,
    FOOTER,
    HEADER,
    ProtobufError,
    decode_example,
    encode_record,
    masked_crc,
)
from packer.sample import KEY, SAMPLES

NAME = "tfrecord"
PART = "part"  # a .tfrecord file and its index
SHAPES = (SAMPLES,)
PACK_OPTIONS = frozenset({"shard_size", "max_count"})
READ_ERRORS = protocol.READ_ERRORS  # TFRecordError is a DatasetError
PART_NAME = "part-{:06d}.tfrecord"
_HEAD, _CRC = struct.Struct("<QI"), struct.Struct("<I")
INDEX_SUFFIX = ".tfindex"
KEYS_SUFFIX = ".tfkeys"
KEYS_BESIDE_PARTS = True  # the writer gets each sample's key, for the part's .tfkeys
_REBUILD = ("pack again, or rebuild the index from the part with the tfrecord package's "
            "`tfrecord2idx PART INDEX`")
SAMPLE_DIGESTS = False  # each part's sha256 covers its samples, each record has its CRCs
PART_KEYS = (("name",), ("sha256",))
encode = encode_record
publish = publish_folder
layout_text = no_layout_text
manifest_in_file = no_file_manifest


def part_limits(options) -> tuple[int, int]:
    """`--shard-size` and `--max-count` bound a part."""
    return options.shard_size, options.max_count or 1 << 62


class TFRecordError(DatasetError, ValueError):
    """A record that does not match its CRCs, is cut short, is not where its index says,
    or holds no valid Example. A ValueError too, as the other formats' decoders raise on
    bad bytes, so that `packer verify` lists it as a problem of its part."""


def index_path(part_path: Path) -> Path:
    return part_path.with_suffix(INDEX_SUFFIX)


def keys_path(part_path: Path) -> Path:
    return part_path.with_suffix(KEYS_SUFFIX)


class TFRecordWriter(Writer):
    """Writes part-NNNNNN.tfrecord, its index and its keys; a part is a file.

    Runs of encoded records are hashed and written by a thread (both release the GIL),
    straight from the workers' buffers, as tar shards are; the index is written from
    the records' lengths when the part closes, and the keys from the chunks' (a part
    whose keys did not all come with its chunks gets no .tfkeys).
    """

    def _begin_part(self, part: dict) -> None:
        part["name"] = PART_NAME.format(part["index"])
        self._file = open(self.folder / part["name"], "wb")  # noqa: SIM115 (closed in _seal_part)
        self._file_digest = hashlib.sha256()
        self._lengths: list[int] = []
        self._keys: list[str] = []
        self._writes: deque[Future] = deque()
        if not hasattr(self, "_io"):
            self._io = ThreadPoolExecutor(1, thread_name_prefix="tfrecord-writer")

    def _store_run(self, data: memoryview, lengths: list[int]) -> None:
        self._lengths += lengths
        while len(self._writes) >= 2:
            self._writes.popleft().result()
        self._writes.append(self._io.submit(_hash_and_write, self._file_digest, self._file, data))

    def _store_keys(self, keys: tuple) -> None:
        self._keys += keys

    def _seal_part(self, part: dict) -> None:
        while self._writes:
            self._writes.popleft().result()
        self._file.close()
        part["sha256"] = self._file_digest.hexdigest()
        starts = [0, *accumulate(self._lengths)][:-1]
        lines = "".join(map("{} {}\n".format, starts, self._lengths))
        index_path(self.folder / part["name"]).write_text(lines)
        if len(self._keys) == len(self._lengths):
            listed = json.dumps(self._keys).encode()
            keys_path(self.folder / part["name"]).write_bytes(listed)
            part["keys_sha256"] = hashlib.sha256(listed).hexdigest()

    def truncate(self, count: int) -> None:
        kept = {p["name"] for p in self.parts}
        for path in self.folder.glob("part-*.tfrecord"):
            if path.name not in kept:
                path.unlink()
                index_path(path).unlink(missing_ok=True)
                keys_path(path).unlink(missing_ok=True)

    def finish(self, manifest: dict) -> None:
        if hasattr(self, "_io"):
            self._io.shutdown()


def _hash_and_write(digest, file, data) -> None:
    digest.update(data)
    file.write(data)


def load_index(path: Path, count: int) -> np.ndarray:
    """The byte offset where each record starts, and the end of the last: (count + 1,).
    The index must list `count` records, back to back from the start of the file."""
    where = index_path(path)
    try:
        numbers = np.array(where.read_text().split(), np.int64)
    except (OSError, ValueError) as err:
        raise TFRecordError(f"{where}: cannot read the index of {path.name}: {err}; "
                            f"{_REBUILD}") from None
    if numbers.size != 2 * count:
        raise TFRecordError(f"{where}: lists {numbers.size // 2:,} records, the manifest says "
                            f"{path.name} holds {count:,}; {_REBUILD}")
    starts, sizes = numbers[0::2], numbers[1::2]
    ends = starts + sizes
    gaps = np.flatnonzero(starts[1:] != ends[:-1])
    if count and (starts[0] != 0 or gaps.size or (sizes < HEADER + FOOTER).any()):
        line = 1 if starts[0] != 0 else int(gaps[0]) + 2 if gaps.size else int(
            np.argmax(sizes < HEADER + FOOTER)) + 1
        raise TFRecordError(f"{where}: line {line} does not give the next record of "
                            f"{path.name} (records lie back to back from byte 0); {_REBUILD}")
    return np.append(starts, ends[-1] if count else 0)


class Reader(PartFiles):
    """Runs of samples by index from local parts. The indexes are loaded when the
    reader is made (they travel with it to workers); files are opened lazily in the
    process that reads, so no file handle crosses a fork."""

    def __init__(self, folder: Path, manifest: dict, parts: list[dict] | None = None):
        parts = manifest["parts"] if parts is None else parts
        self.paths = {p["index"]: Path(folder) / p["name"] for p in parts}
        self.offsets = {p["index"]: load_index(self.paths[p["index"]], p["count"])
                        for p in parts}
        self.shapes = {name: tuple(spec["shape"]) for name, spec in manifest["fields"].items()
                       if spec.get("dtype") == "float32" and "shape" in spec}

    def _opened(self, part: int, fd: int) -> None:
        size, end = os.fstat(fd).st_size, int(self.offsets[part][-1])
        if size > end:
            raise TFRecordError(f"{self.paths[part]}: {size - end:,} bytes after the last "
                                f"record, which ends at byte offset {end:,}")

    def read(self, part: int, start: int, count: int) -> list[dict]:
        return list(self.records(part, start, count))

    def prefetch(self, runs) -> None:
        """Ask the kernel to read ahead the byte ranges of `runs` (packer.formats.readahead)."""
        for run in runs:
            starts = self.offsets[run.part][run.start:run.start + run.count + 1]
            if len(starts) > 1:
                file_range(self._fd(run.part), int(starts[0]), int(starts[-1] - starts[0]))

    def records(self, part: int, start: int, count: int) -> Iterator[dict]:
        """Samples start .. start+count-1 of a part, read in one piece; those before a
        damaged or cut record are yielded before the error is raised."""
        starts = self.offsets[part][start:start + count + 1].tolist()
        if len(starts) < 2:
            return
        low = starts[0]
        data = os.pread(self._fd(part), starts[-1] - low, low)
        for number, (begin, end) in enumerate(zip(starts, starts[1:], strict=False), start):
            if end - low > len(data):
                raise TFRecordError(f"{self.paths[part]}: truncated: the file ends at byte "
                                    f"{low + len(data):,}, inside record {number:,}, which "
                                    f"starts at byte offset {begin:,}; restore the part "
                                    "from a copy or pack again")
            yield self._sample(data, begin - low, end - low, part, begin)

    def _sample(self, data: bytes, begin: int, end: int, part: int, offset: int) -> dict:
        length, length_crc = _HEAD.unpack_from(data, begin)
        body_end = end - FOOTER
        if masked_crc(data[begin:begin + 8]) != length_crc:
            self._fail(part, offset, "its length does not match its CRC-32C (the file is "
                       "damaged there)")
        if HEADER + length + FOOTER != end - begin:
            self._fail(part, offset, f"holds {length:,} bytes of data, the index "
                       f"{index_path(self.paths[part]).name} gives it "
                       f"{end - begin - HEADER - FOOTER:,}")
        if masked_crc(memoryview(data)[begin + HEADER:body_end]) != _CRC.unpack_from(
                data, body_end)[0]:
            self._fail(part, offset, "its data do not match their CRC-32C (the file is "
                       "damaged there)")
        try:
            return self._fields(decode_example(data, begin + HEADER, body_end))
        except (ProtobufError, IndexError, UnicodeDecodeError) as err:
            self._fail(part, offset, f"not a tf.train.Example: {err}")

    def _fail(self, part: int, offset: int, what: str) -> NoReturn:
        raise TFRecordError(f"{self.paths[part]}: the record at byte offset {offset:,}: "
                            f"{what}; restore the part from a copy or pack again")

    def _fields(self, features: dict) -> dict:
        kind, values = features.pop(KEY, (BYTES_LIST, []))
        if kind != BYTES_LIST or len(values) != 1:
            raise ProtobufError(f"no single bytes feature {KEY}")
        sample = {KEY: values[0].decode("utf-8", "surrogateescape")}
        for name, (kind, values) in features.items():
            if kind == FLOAT_LIST:
                sample[name] = self._array(name, values)
            else:
                sample[name] = values[0] if len(values) == 1 else values
        return sample

    def _array(self, name: str, values: list[bytes]):
        """A float32 array in the shape the manifest gives the field (1-D without one)."""
        array = np.frombuffer(b"".join(values), "<f4").copy()
        shape = self.shapes.get(name)
        return array.reshape(shape) if shape is not None and array.size == int(
            np.prod(shape)) else array



def reader(folder: Path, manifest: dict) -> Reader:
    return Reader(folder, manifest)


def read_part(folder: Path, manifest: dict, part: dict, run: int = 1024) -> Iterator[dict]:
    """Every sample of a part in order, every record checked: the whole file is read."""
    part_reader = Reader(folder, manifest, [part])
    try:
        for start in range(0, part["count"], run):
            yield from part_reader.records(part["index"], start, min(run, part["count"] - start))
    finally:
        part_reader.close()


def part_keys(folder: Path, manifest: dict, part: dict) -> list[str]:
    """A part's keys from its .tfkeys (what an append checks), where its sha256 is the
    manifest's; else (a part packed before parts had one, a damaged one) from its
    records, every one read."""
    listed = _listed_keys(Path(folder), part)
    if listed is not None:
        keys = json.loads(listed)
        if isinstance(keys, list) and len(keys) == part["count"] \
                and all(isinstance(key, str) for key in keys):
            return keys
    return [sample[KEY] for sample in read_part(folder, manifest, part)]


def _listed_keys(folder: Path, part: dict) -> bytes | None:
    """The part's .tfkeys as stored, if the manifest records its sha256 and it matches."""
    try:
        listed = keys_path(folder / part["name"]).read_bytes()
    except OSError:
        return None
    return listed if hashlib.sha256(listed).hexdigest() == part.get("keys_sha256") else None


def data_files(path: Path, manifest: dict) -> list[Path]:
    return [Path(path) / part["name"] for part in manifest["parts"]]


def part_files(part: dict) -> list[str]:
    return [part["name"], index_path(Path(part["name"])).name]


def optional_part_files(part: dict) -> list[str]:
    """The part's .tfkeys, where the manifest records one: uploaded with the part, and
    fetched with it from object storage (what verify checks and an append reads)."""
    return [keys_path(Path(part["name"])).name] if "keys_sha256" in part else []


def verify_part(path: Path, manifest: dict, part: dict, name: str,
                compare) -> tuple[list[str], int]:
    """The part's size and sha256, and every record read through its index (each
    record's CRCs say where a change is, without the source)."""
    file_problems = part_file_problems(Path(path), part)
    listed = keys_path(Path(path) / part["name"])
    if "keys_sha256" in part and listed.exists() and _listed_keys(Path(path), part) is None:
        file_problems.append(f"{listed.name}: its sha256 is not the manifest's keys_sha256 "
                             "(the part's keys, which an append checks new keys against); "
                             "delete it (an append then reads the keys from the records), "
                             "or pack again")
    problems, seen = sample_problems(read_part(path, manifest, part), part, name, compare,
                                     READ_ERRORS)
    return file_problems + problems, seen


WRITER = TFRecordWriter
