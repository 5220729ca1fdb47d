"""LMDB: one environment per generation, one record per sample, no pickles.

    OUT/
      manifest.json
      data.mdb, lock.mdb       lmdb.open("OUT", readonly=True, lock=False)
      gen-000001.mdb           lmdb.open("OUT/gen-000001.mdb", subdir=False, readonly=True,
      gen-000002.mdb             lock=False): the samples of each append, where there were any

    key b"0000000000" .. b"%010d" % (N - 1)   (sample index, zero-padded: INDEX_KEY), in
           the file of its generation: data.mdb holds the pack's samples, each gen file an
           append's (the manifest's parts say which: `"file"`, none for data.mdb)
    value  msgpack map {"__key__": str, "jpg": bytes, ..., "cls": int}; stored pixels
           (rgb.npy, `--encode raw`) come last, so that a reader finds them in place
    key b"__meta__"  in each file, JSON {"count", "classes", "fields", "key_format",
           "value_encoding"} of that file's samples (a gen file's also "first", its first
           sample's index, and "generation")

Samples of a part are committed in one write transaction. The map starts at the
size the input needs and doubles whenever LMDB reports it full, so big data never
fails on a fixed map size. An append never writes data.mdb or an earlier gen file:
its writer (`setup["generation"]`) makes the generation's own file, so that staging
the dataset for it takes hard links, not a copy (packer.packing.append). The files'
environments are opened through packer.formats.lmdb.environments.
"""

import json
import os
from bisect import bisect_right
from collections import deque
from collections.abc import Iterator
from itertools import islice
from pathlib import Path

import lmdb
import msgpack

from packer.errors import DatasetError
from packer.formats import msgpack_columns, protocol
from packer.formats.base import ProcessReader, Writer
from packer.formats.lmdb.environments import (
    GENERATION_FILE,
    MAIN_FILE,
    check_environments,
    data_path,
    environment,
    environment_path,
    file_names,
    let_go,
)
from packer.formats.lmdb.environments import layout_text as layout_text  # the protocol's
from packer.formats.msgpack_values import DECODE_ERRORS as _DECODE_ERRORS
from packer.formats.msgpack_values import InPlace, decode_value, value_key
from packer.formats.protocol import (
    block_limits,
    no_file_manifest,
    publish_folder,
    sample_problems,
    shared_files,
)
from packer.formats.readahead import DONE, mapped_range
from packer.sample import (
    INDEX_KEY,
    INDEX_KEY_BYTES,
    KEY,
    RAW_IMAGE_FIELD,
    SAMPLES,
    msgpack_default,
    npy_header_size,
)

NAME = "lmdb"
PART = "part"  # samples committed in one write transaction
SHAPES = (SAMPLES,)
PACK_OPTIONS = frozenset()
SAMPLE_DIGESTS = True
PART_KEYS = (("samples_sha256",),)
READ_ERRORS = (*protocol.READ_ERRORS, msgpack.UnpackException)
META_KEY = b"__meta__"
part_limits = block_limits
publish = publish_folder
part_files = shared_files
manifest_in_file = no_file_manifest


def initial_map_size(input_bytes: int) -> int:
    """Room for the input plus encoding overhead; `_commit` doubles it when full."""
    return max(64 << 20, int(input_bytes * 1.25))


def sample_key(index: int) -> bytes:
    return INDEX_KEY_BYTES % index




def encode(sample: dict) -> list[bytes]:
    if RAW_IMAGE_FIELD in sample:  # last: see InPlace
        sample = {**sample}
        sample[RAW_IMAGE_FIELD] = sample.pop(RAW_IMAGE_FIELD)
    return [msgpack.packb(sample, use_bin_type=True, default=msgpack_default)]


class LmdbWriter(Writer):
    def __init__(self, folder: Path, setup: dict, max_part_bytes: int, max_part_count: int):
        super().__init__(folder, setup, max_part_bytes, max_part_count)
        generation = setup.get("generation")  # an append's: its own file, lock-free (one
        self.file = GENERATION_FILE % generation if generation else MAIN_FILE  # writer)
        self.env = lmdb.open(str(environment_path(folder, self.file)), meminit=False,
                             map_size=initial_map_size(setup["input_bytes"]),
                             subdir=self.file == MAIN_FILE, lock=self.file == MAIN_FILE)
        self._pending: list[tuple[bytes, bytes]] = []

    def _store_run(self, data: memoryview, lengths: list[int]) -> None:
        offset = 0
        for index, length in enumerate(lengths, self.count):
            self._pending.append((sample_key(index), bytes(data[offset:offset + length])))
            offset += length

    def _seal_part(self, part: dict) -> None:
        if self.file != MAIN_FILE:
            part["file"] = self.file
        self._commit(self._pending)
        self._pending = []

    def pending_bytes(self) -> int:
        # values of a few KB take whole overflow pages: up to about twice their size
        return 2 * self._open_part["bytes"] if self._open_part else 0

    def _commit(self, items: list[tuple[bytes, bytes]]) -> None:
        samples = all(k != META_KEY for k, _ in items)
        while True:
            try:
                with self.env.begin(write=True) as txn:
                    if samples:  # put after the last key, so the meta (an append's) goes
                        txn.delete(META_KEY)  # first: `finish` writes it again
                    txn.cursor().putmulti(items, append=samples)
                return
            except lmdb.MapFullError:
                self.env.set_mapsize(self.env.info()["map_size"] * 2)

    def truncate(self, count: int) -> None:
        """Delete the samples from `count` on; where there are none (a generation's new
        file), nothing is written."""
        with self.env.begin() as txn:
            cursor = txn.cursor()
            if not cursor.set_range(sample_key(count)) or cursor.key() == META_KEY:
                return
        while True:  # a delete takes pages too: the map doubles when full, as in _commit
            try:
                with self.env.begin(write=True) as txn:
                    cursor = txn.cursor()
                    if cursor.set_range(sample_key(count)):  # the meta too: `finish` writes it
                        while cursor.delete():
                            pass
                return
            except lmdb.MapFullError:
                self.env.set_mapsize(self.env.info()["map_size"] * 2)

    def finish(self, manifest: dict) -> None:
        """The file's meta record (its own samples'), and the file made durable; a
        generation's file that got no samples (all skipped) is removed."""
        parts = [p for p in manifest["parts"] if p.get("file", MAIN_FILE) == self.file]
        meta = {"count": sum(p["count"] for p in parts), "classes": manifest["classes"],
                "fields": manifest["fields"], "key_format": INDEX_KEY,
                "value_encoding": "msgpack"}
        if self.file != MAIN_FILE:
            if not parts:
                self.env.close()
                (self.folder / self.file).unlink()
                return
            meta.update(first=parts[0]["first"], generation=self.setup["generation"])
        self._commit([(META_KEY, json.dumps(meta).encode())])
        self.env.sync(True)
        self.env.close()


class Reader(ProcessReader):
    """Runs of samples by index, each from the file its part is in. The environments
    are opened with readahead on (off, the usual PyTorch snippet, is much slower on a
    cold cache), each when a run first needs it."""

    def __init__(self, folder: Path, manifest: dict):
        self.folder, self.firsts = folder, [p["first"] for p in manifest["parts"]]
        names = file_names(manifest)
        self.paths = [environment_path(folder, name) for name in names]  # what lmdb opens
        self.file_of = [names.index(p.get("file", MAIN_FILE)) for p in manifest["parts"]]
        check_environments(folder, manifest)

    _txns = _in_place = _layout = None  # read_window's transactions and decoders, here

    def _open_handle(self, inherited):
        """This process's environments, one per file, opened by `_env` when first used
        (never the inherited ones: see environment)."""
        self._txns = [None] * len(self.paths)
        self._in_place, self._layout, self._held = None, None, deque([[]])
        return [None] * len(self.paths)

    def _env(self, file: int):
        envs = self.handle()
        if envs[file] is None:
            envs[file] = environment(self.paths[file])
        return envs[file]

    def read(self, part: int, start: int, count: int) -> list[dict]:
        first = self.firsts[part] + start
        try:  # values seen in the map (buffers), decoded before the transaction ends
            with self._env(self.file_of[part]).begin(buffers=True) as txn:
                values = self._values(txn, first, count)
                samples = self._decode_all(values, first, decode_value)
                if values:
                    mapped_range(values[0], values[-1], DONE)
                return samples
        except lmdb.Error as err:
            raise self._damaged(first, count, err) from None

    def read_window(self, runs, field: str) -> dict | list[dict]:
        """The samples of `runs` (a window of the loader's), as {field name: column}
        where their values share one layout (msgpack_columns), else as a list of
        samples whose `field` may be a memoryview of the memory map (InPlace), valid
        until `close()`: one read transaction per file stays open until then. Their
        pages stay in this process until `next_window` lets them go."""
        self.handle()
        values = []
        for run in runs:  # a window's runs lie apart: the one that fails is named
            first = self.firsts[run.part] + run.start
            try:
                values.append(self._values(self._txn(self.file_of[run.part]), first,
                                           run.count))
            except lmdb.Error as err:
                raise self._damaged(first, run.count, err) from None
        self._held[-1] += [(run[0], run[-1]) for run in values if run]
        window = self._columns([value for run in values for value in run], field)
        if window is not None:
            return window
        samples = []
        for run, run_values in zip(runs, values, strict=True):
            in_place = self._in_place or InPlace(field, run_values[0] if run_values else b"")
            if in_place.entry:  # kept once the first value gave the layout
                self._in_place = in_place
            samples += self._decode_all(run_values, self.firsts[run.part] + run.start,
                                        in_place)
        return samples

    def _txn(self, file: int):
        """read_window's read transaction of a file, begun when first needed."""
        txn = self._txns[file]
        if txn is None:
            txn = self._txns[file] = self._env(file).begin(buffers=True)
        return txn

    def _columns(self, values: list, field: str) -> dict | None:
        """The window's values as columns, if they all have the layout of the first
        (stored pixels: with the first's .npy header)."""
        if not values:
            return None
        if self._layout is None or len(values[0]) != self._layout.length:
            self._layout = msgpack_columns.layout(values[0], field, npy_header_size)
        return self._layout and msgpack_columns.columns(values, self._layout)

    def next_window(self) -> None:
        """The loader begins a window of runs: the samples read in place for the window
        before last are in batches by now, so their pages leave this process."""
        for low, high in self._held.popleft() if len(self._held) == 2 else ():
            mapped_range(low, high, DONE)
        self._held.append([])

    def close(self) -> None:
        if self._pid == os.getpid() and self._handle is not None:
            for txn in self._txns:
                if txn is not None:
                    txn.abort()
            for path, env in zip(self.paths, self._handle, strict=True):
                if env is not None:
                    let_go(path)
        self._txns = self._in_place = self._layout = self._handle = self._pid = None
        self._held = deque([[]])

    def __getstate__(self):
        return {**super().__getstate__(), "_txns": None, "_in_place": None, "_layout": None,
                "_held": deque([[]])}

    def keys(self, part: dict) -> list[str]:
        """A part's keys, each read from the head of its value (see value_key): the
        rest of the value is neither copied nor decoded."""
        first = part["first"]
        try:
            with self._env(self.file_of[part["index"]]).begin(buffers=True) as txn:
                values = self._values(txn, first, part["count"])
                return [value_key(value) or self._decoded(first + number, value)[KEY]
                        for number, value in enumerate(values)]
        except lmdb.Error as err:
            raise self._damaged(first, part["count"], err) from None

    def _values(self, txn, first: int, count: int) -> list:
        cursor = txn.cursor()
        if not cursor.set_key(sample_key(first)):
            raise DatasetError(f"{self._file(first)}: sample {first} is missing from the LMDB")
        values = list(islice(cursor.iternext(keys=False), count))
        if len(values) < count:
            raise DatasetError(f"{self._file(first)}: samples {first + len(values)} and on "
                               "are missing from the LMDB")
        return values

    def _file(self, index: int) -> Path:
        """The data file that holds sample `index` (what a message names)."""
        return data_path(self.paths[self.file_of[bisect_right(self.firsts, index) - 1]])

    def _decode_all(self, values: list, first: int, decode) -> list[dict]:
        try:
            return [decode(v) for v in values]
        except _DECODE_ERRORS:
            return [self._decoded(first + i, v) for i, v in enumerate(values)]

    def _damaged(self, first: int, count: int, err: Exception) -> DatasetError:
        return DatasetError(f"{self._file(first)}: damaged where samples {first:,} to "
                            f"{first + count - 1:,} are ({err}); restore it from a copy or "
                            "pack the source again")

    def prefetch(self, runs) -> None:
        """Ask the kernel to read ahead the pages the values of `runs` lie on (found
        through the index pages only; packer.formats.readahead), in one read
        transaction per file."""
        txns = {}
        try:
            for run in runs:
                file = self.file_of[run.part]
                if file not in txns:
                    txns[file] = self._env(file).begin(buffers=True)
                first = self.firsts[run.part] + run.start
                low = txns[file].get(sample_key(first))
                high = txns[file].get(sample_key(first + run.count - 1))
                if low is not None and high is not None:
                    mapped_range(low, high)
        except lmdb.Error:  # the read that follows names the damage
            pass
        finally:
            for txn in txns.values():
                txn.abort()

    def _decoded(self, index: int, value: bytes) -> dict:
        """One value decoded, or a DatasetError naming its key (after a failed run)."""
        try:
            return decode_value(value)
        except _DECODE_ERRORS as err:
            raise DatasetError(f"{self._file(index)}: the value under key "
                               f"{sample_key(index).decode()} is damaged (it does not decode: "
                               f"{str(err) or type(err).__name__}); restore the file from a "
                               "copy or pack the source again") from None


def reader(path: Path, manifest: dict) -> Reader:
    return Reader(path, manifest)


def read_part(path: Path, manifest: dict, part: dict) -> Iterator[dict]:
    return Reader(path, manifest).read_part(part)


def part_keys(path: Path, manifest: dict, part: dict) -> list[str]:
    """A part's keys without its samples' data (what an append checks)."""
    part_reader = Reader(Path(path), manifest)
    try:
        return part_reader.keys(part)
    finally:
        part_reader.close()


def data_files(path: Path, manifest: dict) -> list[Path]:
    """data.mdb and each generation's file."""
    return [Path(path) / name for name in file_names(manifest)]


def verify_part(path: Path, manifest: dict, part: dict, name: str,
                compare) -> tuple[list[str], int]:
    return sample_problems(read_part(path, manifest, part), part, name, compare, READ_ERRORS)


WRITER = LmdbWriter
