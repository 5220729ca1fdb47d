"""The HDF5 writer: one dataset per field (or a dump's records), grown part by part.

Datasets are chunked and resizable, and grow block by block as samples arrive, so
memory does not grow with the dataset. A dump's records and class ids are contiguous
and allocated when created, so each part's records are copied to their place in the
file by the kernel (`add_records`), not through HDF5.
"""

import ctypes
import errno
import io
import json
import os
from pathlib import Path

import h5py
import msgpack
import numpy as np
from isal.isal_zlib import crc32

from packer.errors import DatasetError, PackerError
from packer.formats.base import CannotResume, Writer
from packer.formats.hdf5.generations import INDEX_NAME, generation_name, write_index
from packer.sample import KEY

FILE_NAME = "data.h5"  # the file in the folder a pack writes
INTERRUPTED_NAME = "data.h5.interrupted"  # an interrupted run's file, while resuming
_CHUNK = 1024
_BLOCK = 512  # samples buffered before one write per dataset
_BYTES = h5py.vlen_dtype(np.dtype("uint8"))
_EMPTY = np.empty(0, np.uint8)


def _layout(spec: dict) -> tuple[object, tuple[int, ...]]:
    """The HDF5 dtype and the per-sample shape of a field."""
    if spec["dtype"] == "bytes":
        return _BYTES, ()
    if spec["dtype"] == "str":
        return h5py.string_dtype("utf-8"), ()
    return np.dtype(spec["dtype"]), tuple(spec.get("shape", ()))


def dataset_names(manifest_or_setup: dict) -> dict[str, str]:
    """Field -> HDF5 dataset name: the field's own name unless its spec gives a
    `dataset` (tables store `features`, `labels`, `keys`)."""
    names = {KEY: manifest_or_setup.get("key_dataset", KEY)}
    names.update((name, spec.get("dataset", name))
                 for name, spec in manifest_or_setup["fields"].items())
    return names


def _array(value) -> np.ndarray:
    """A numeric field value: a number, an array, or .npy bytes (after msgpack)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return np.load(io.BytesIO(value), allow_pickle=False)
    return np.asarray(value)


def _chunk_rows(spec: dict, dtype, shape: tuple) -> int:
    """Rows per chunk: 1024 for variable-length data, about 256 KB of numbers else
    (small chunks of small records make writing many times slower)."""
    if spec["dtype"] in ("bytes", "str"):
        return _CHUNK
    return max(1, (256 << 10) // max(1, int(np.prod(shape)) * dtype.itemsize))


class Hdf5Writer(Writer):
    """Writes data.h5; a part is a flushed block of samples."""

    def __init__(self, folder: Path, setup: dict, max_part_bytes: int, max_part_count: int):
        super().__init__(folder, setup, max_part_bytes, max_part_count)
        path, self.records = folder / FILE_NAME, setup.get("records")
        self.interrupted = folder / INTERRUPTED_NAME
        # an append's rows go to a file of their own, its generation's (generations.py)
        self.generation_file = (generation_name(setup["dataset_name"], setup["generation"])
                                if setup.get("generation") else None)
        if path.exists() and not self.records:  # a resumed run: truncate
            if self.interrupted.exists():  # left by a resume stopped while copying
                path.unlink()
            else:
                path.rename(self.interrupted)
        # No chunk cache: blocks are written to the file directly, not copied through it.
        self.file = h5py.File(path, "a" if path.exists() else "w", rdcc_nbytes=0)
        self.fields = dict(setup["fields"])
        # Samples from column blocks have their index as key: no key dataset is written.
        self.implicit_keys = bool(setup.get("implicit_keys"))
        self.columns = [*self.fields] if self.implicit_keys else [KEY, *self.fields]
        self.names = dataset_names(setup)
        self._buffer: list[dict] = []
        self._datasets: dict[str, h5py.Dataset] = {}
        if self.records:
            self._fd = self._open_records()
        elif self.names[self.columns[0]] not in self.file:
            self._create()

    def _dataset(self, name: str) -> h5py.Dataset:
        """The field's dataset, opened once for all the writes."""
        if name not in self._datasets:
            self._datasets[name] = self.file[self.names.get(name, name)]
        return self._datasets[name]

    def _create(self) -> None:
        specs = {KEY: {"dtype": "str"}, **self.fields}
        for name in self.columns:
            dtype, shape = _layout(specs[name])
            # Rows are always written before they are read: without a fill value to write
            # first, HDF5 writes a block's chunks straight from the block's arrays.
            fill = {} if h5py.check_vlen_dtype(dtype) else {"fill_time": "never"}
            self.file.create_dataset(self.names[name], shape=(0, *shape), maxshape=(None, *shape),
                                     chunks=(_chunk_rows(specs[name], dtype, shape), *shape),
                                     dtype=dtype, track_times=False, **fill)
        self.file.attrs["classes"] = self.setup.get("classes") or []
        for name, value in (self.setup.get("attrs") or {}).items():  # e.g. feature names
            self.file.attrs[name] = value

    def _open_records(self) -> int:
        """The records layout, created if new, and a descriptor to write its rows by."""
        layout = self.records
        if layout["dataset"] not in self.file:
            self._contiguous(layout["dataset"], self.setup["record_dtype"], layout["records"])
            if "cls" in self.fields:
                self._contiguous("cls", np.dtype("int64"), layout["samples"])
            self.file.attrs["classes"] = self.setup.get("classes") or []
            self.file.flush()
        records = self._dataset(layout["dataset"])
        if records.dtype != self.setup["record_dtype"] or len(records) != layout["records"]:
            raise DatasetError(f"{self.file.filename}: its records ({len(records):,} of "
                               f"{records.dtype}) are not those of this dump and spec; start "
                               "over with --overwrite")
        return os.open(self.file.filename, os.O_WRONLY)

    def _contiguous(self, name: str, dtype: np.dtype, rows: int) -> None:
        """A fixed-size dataset whose space is allocated now and never filled by HDF5,
        so its rows can be written straight into the file at its offset."""
        plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        plist.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
        self.file.create_dataset(name, shape=(rows,), dtype=dtype, dcpl=plist,
                                 fill_time="never", track_times=False)

    def add_records(self, source, count: int) -> np.ndarray | None:
        """The next `count` samples of a dump as one part: their records written into
        the records dataset by the source (`write_records`, which gives their CRC-32),
        their class ids into `cls`; returns the class ids. Each part writes the
        records from its first sample's to the next part's first, the last part up
        to the dump's end."""
        layout, first = self.records, self.count
        stride = layout["stride"] or 1
        start = first * stride
        stop = (first + count) * stride if first + count < layout["samples"] else layout["records"]
        records = self._dataset(layout["dataset"])
        crc = source.write_records(start, stop, self._fd,
                                   records.id.get_offset() + start * records.dtype.itemsize)
        labels = None
        if "cls" in self.fields:  # written by HDF5: a contiguous write changes no metadata
            labels = source.sample_labels(first, count).astype(np.int64)
            self._dataset("cls").write_direct(labels, dest_sel=np.s_[first:first + count])
            self.file.flush()
            crc = crc32(labels, crc)
        self.parts.append({"index": len(self.parts), "first": first, "count": count,
                           "bytes": (stop - start) * records.dtype.itemsize,
                           "records": [start, stop], "records_crc32": crc,
                           "values_crc32": source.values_crc32(start, stop)})
        self.count += count
        return labels

    def _store(self, encoded) -> None:
        self._buffer.append(msgpack.unpackb(encoded))
        if len(self._buffer) >= _BLOCK:
            self._flush_buffer()

    def _flush_buffer(self) -> None:
        if not self._buffer:
            return
        start, rows = self._dataset(self.columns[0]).shape[0], len(self._buffer)
        for name in self.columns:
            dataset = self._dataset(name)
            dataset.resize(start + rows, axis=0)
            # write_direct: plain assignment fails when all vlen rows have one length
            dataset.write_direct(self._column(name, dataset.dtype), dest_sel=np.s_[start:])
        self._buffer = []

    def _column(self, name: str, dtype) -> np.ndarray:
        if name == KEY:
            return np.array([s[KEY] for s in self._buffer], dtype=object)
        if dtype != _BYTES:
            lacking = next((s[KEY] for s in self._buffer if name not in s), None)
            if lacking is not None:
                raise PackerError(f"sample {lacking!r} has no {name}, which HDF5 stores as "
                                  "one array of a row per sample; pack the samples that "
                                  "lack it separately, or --to another format")
            return np.stack([_array(s[name]) for s in self._buffer]).astype(dtype, copy=False)
        column = np.empty(len(self._buffer), dtype=_BYTES)
        for i, sample in enumerate(self._buffer):
            value = sample.get(name)
            column[i] = _EMPTY if value is None else np.frombuffer(value, np.uint8)
        return column

    def add_block(self, columns: dict[str, np.ndarray], crc32: int) -> int:
        """Append a block of samples given as columns (with their `columns_crc32`), as
        one part; returns its size."""
        rows = len(next(iter(columns.values())))
        start = self._dataset(self.columns[0]).shape[0]
        for name, values in columns.items():
            dataset = self._dataset(name)
            dataset.resize(start + rows, axis=0)
            dataset.write_direct(np.ascontiguousarray(values, dataset.dtype),
                                 dest_sel=np.s_[start:])
        part = {"index": len(self.parts), "first": self.count, "count": rows,
                "bytes": sum(v.nbytes for v in columns.values()),
                "columns_crc32": crc32}
        self.file.flush()
        self.parts.append(part)
        self.count += rows
        return rows

    def reserve(self, nbytes: int) -> None:
        """Allocate the disk blocks the next writes will take, past the file's end
        without changing its size: HDF5 crashes the process when the disk fills
        while it writes variable-length rows, so it must never meet a full disk.
        The rows take about their size; metadata and heap headers a little more."""
        _claim_space(self.file.filename, os.path.getsize(self.file.filename),
                     nbytes + nbytes // 4 + (1 << 20))

    def resume(self, parts: list[dict]) -> str | None:
        """As Writer.resume; an append's writer names the file of every part before it:
        the packed file's are in generation 0 from now on."""
        if self.generation_file:
            first = generation_name(self.setup["dataset_name"], 0)
            parts = [{**part, "file": part.get("file", first)} for part in parts]
        return super().resume(parts)

    def _seal_part(self, part: dict) -> None:
        self._flush_buffer()
        self.file.flush()
        if self.generation_file:
            part["file"] = self.generation_file

    def truncate(self, count: int) -> None:
        """Continue an interrupted run after its first `count` rows. HDF5 does not keep
        a file consistent through a crash: metadata written after the last flush can
        point past the end the file records, and writing to such a file fails or
        corrupts it. So the interrupted file is only read: its first `count` rows are
        copied into a new file, and the run goes on there. Records (fixed-size,
        allocated when created and written outside HDF5) need nothing."""
        if self.records or not self.interrupted.exists():
            return
        # an append's file holds its own parts' rows alone, from row 0
        rows = sum(p["count"] for p in self.parts if p.get("file") == self.generation_file)
        try:
            _extend_allocation(self.interrupted)
            with h5py.File(self.interrupted, "r") as interrupted:
                for name in self.columns:
                    self._copy_rows(interrupted[self.names[name]], self._dataset(name), rows)
        except (OSError, RuntimeError, ValueError, KeyError) as err:
            self._start_over()
            raise CannotResume(f"the interrupted run's HDF5 file cannot be read back "
                               f"({err})") from None
        finally:
            self.interrupted.unlink(missing_ok=True)
        self.file.flush()

    def _start_over(self) -> None:
        path = Path(self.file.filename)
        self.file.close()
        path.unlink()
        self.file, self._datasets = h5py.File(path, "w", rdcc_nbytes=0), {}
        self._create()

    @staticmethod
    def _copy_rows(source: h5py.Dataset, target: h5py.Dataset, count: int) -> None:
        if len(source) < count:
            raise ValueError(f"{source.name} holds {len(source):,} rows, not {count:,}")
        target.resize(count, axis=0)
        for start in range(0, count, _CHUNK):
            stop = min(start + _CHUNK, count)
            target.write_direct(source[start:stop], dest_sel=np.s_[start:stop])

    def finish(self, manifest: dict) -> None:
        """The manifest into the file's attributes; an append's into its index file
        instead, beside its generation's file (none where all its inputs were skipped)."""
        if self.records:
            os.close(self._fd)
        if self.generation_file:
            datasets = {self.names[name]: (self._dataset(name).dtype,
                                           self._dataset(name).shape[1:])
                        for name in self.columns}
            write_index(self.folder / INDEX_NAME, self.setup["dataset_name"], manifest,
                        datasets)
        else:
            self.file.attrs["packer_manifest"] = json.dumps(manifest)
        path = self.file.filename
        self.file.close()
        os.truncate(path, os.path.getsize(path))  # frees blocks claimed past the end
        if self.generation_file and not any(p.get("file") == self.generation_file
                                            for p in manifest["parts"]):
            os.unlink(path)


_KEEP_SIZE = 1  # FALLOC_FL_KEEP_SIZE
_LIBC = ctypes.CDLL(None, use_errno=True) if os.name == "posix" else None


def _claim_space(path: str, offset: int, length: int) -> None:
    """fallocate(2) with FALLOC_FL_KEEP_SIZE: blocks allocated, size unchanged. Where
    the system or the file system cannot, nothing is claimed (the room check before
    each part is what holds there)."""
    claim = getattr(_LIBC, "fallocate", None)
    if claim is None:
        return
    fd = os.open(path, os.O_WRONLY)
    try:
        if claim(fd, _KEEP_SIZE, ctypes.c_int64(offset), ctypes.c_int64(length)) != 0:
            code = ctypes.get_errno()
            if code not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise OSError(code, os.strerror(code), path)
    finally:
        os.close(fd)


def _extend_allocation(path: Path) -> None:
    """Set the end of allocation an interrupted file's superblock records to the file's
    size, as `h5clear --increment` does. A killed writer leaves blocks allocated after
    its last flush (a grown heap of variable-length rows) past the recorded end, and
    HDF5 then refuses to read them ("actual len exceeds EOA"), though the rows of every
    flushed part are there. Superblocks of version 0 and 1 (what h5py writes by
    default) keep the address unchecksummed at a fixed place."""
    with open(path, "r+b") as file:
        head = file.read(_EOA_AT[1] + 8)
        version = head[8] if head[:8] == b"\x89HDF\r\n\x1a\n" else None
        if version not in _EOA_AT or head[13] != 8:
            return
        at = _EOA_AT[version]
        size = os.fstat(file.fileno()).st_size
        if int.from_bytes(head[at:at + 8], "little") < size:
            file.seek(at)
            file.write(size.to_bytes(8, "little"))


_EOA_AT = {0: 40, 1: 44}  # superblock version -> offset of the end-of-allocation address
