"""The HDF5 reader: runs of samples as slices of every dataset, and the checksums
of parts written whole."""

import os
from pathlib import Path

import h5py
import numpy as np
from isal.isal_zlib import crc32

from packer.errors import DatasetError
from packer.formats.base import ProcessReader
from packer.formats.hdf5.generations import files_and_rows, first_rows, part_file
from packer.formats.hdf5.writer import dataset_names
from packer.sample import KEY, columns_crc32, index_key, index_keys, values_crc32


class Reader(ProcessReader):
    """Runs of samples as slices of every dataset; the file (an appended dataset's
    generation files, each) opened once per process, lazily, so forked workers never
    share an HDF5 handle."""

    def __init__(self, path: Path, manifest: dict):
        self.path, self.fields = path, manifest["fields"]
        self.names = dataset_names(manifest)
        self.files = [part_file(path, part) for part in manifest["parts"]]
        self.firsts = [p["first"] for p in manifest["parts"]]
        self.rows = first_rows(path, manifest)  # each part's first row in its file
        self.records = manifest.get("records")
        for file, rows in files_and_rows(path, manifest).items():
            self._check_rows(file, rows)

    def _check_rows(self, path: Path, count: int) -> None:
        """A DatasetError unless every dataset of the file holds the rows its `count`
        samples need."""
        file = _open(path)
        try:
            if self.records:
                window, stride = self.records["window"] or 0, self.records["stride"] or 1
                needed = {self.records["dataset"]: (count - 1) * stride + max(window, 1)
                          if count else 0}
                needed.update({"cls": count} if "cls" in self.fields else {})
            else:
                needed = {name: count for name in self.names.values() if name is not None}
            for name, rows in needed.items():
                held = self._rows_of(path, file, name)
                if held is None or held < rows or (held > rows and not self.records):
                    found = "no such dataset" if held is None else f"{held:,} rows"
                    raise DatasetError(f"{path}: dataset {name!r} has {found}, but the "
                                       f"manifest's {count:,} samples in it need {rows:,}; the "
                                       "manifest does not belong to this data (restore it, "
                                       "or pack the source again)")
        finally:
            file.close()

    @staticmethod
    def _rows_of(path: Path, file: h5py.File, name: str) -> int | None:
        """The rows of dataset `name` (None if there is none); a DatasetError where its
        object header is damaged (h5py raises KeyError or RuntimeError for it)."""
        try:
            return len(file[name]) if name in file else None
        except (KeyError, RuntimeError, OSError) as err:
            raise DatasetError(f"{path}: the HDF5 object header of dataset {name!r} is "
                               f"damaged ({err}); restore the file from a copy or pack the "
                               "source again") from None

    def _open_handle(self, inherited) -> dict:
        """This process's open files, by path, each opened when first read."""
        self._datasets = {}
        return {}

    def close(self) -> None:
        if self._handle is not None and self._pid == os.getpid():
            for file in self._handle.values():
                file.close()
        self._handle = self._pid = None

    def _dataset(self, part: int, name: str) -> h5py.Dataset:
        """Dataset `name` of the part's file, looked up once per handle: h5py's lookup
        costs more than reading a run of 64 small samples from it."""
        files, path = self.handle(), self.files[part]
        if (path, name) not in self._datasets:
            if path not in files:
                files[path] = _open(path)
            self._datasets[path, name] = files[path][name]
        return self._datasets[path, name]

    def __getstate__(self):
        return {**super().__getstate__(), "_datasets": {}}

    def read(self, part: int, start: int, count: int) -> list[dict]:
        first = self.rows[part] + start
        try:
            return self._read(part, first, count)
        except OSError as err:  # what h5py raises on damaged bytes
            raise DatasetError(f"{self.files[part]}: damaged where rows {first:,} to "
                               f"{first + count - 1:,} are ({err}); `packer verify "
                               f"{self.path}` says where; restore it from a copy or pack "
                               "the source again") from None

    def keys(self, part: int, start: int, count: int) -> list[str]:
        """The keys of `count` samples from the part's `start`, no data read."""
        if self.records or self.names[KEY] is None:  # samples keyed by their index
            return index_keys(self.firsts[part] + start, count)
        first = self.rows[part] + start
        keys = self._dataset(part, self.names[KEY])[first:first + count]
        if keys.dtype.kind in "iu":  # an int64 key dataset, as earlier versions wrote
            return [index_key(i) for i in keys.tolist()]
        return [key.decode("utf-8") for key in keys]

    def _read(self, part: int, first: int, count: int) -> list[dict]:
        """`count` samples from row `first` of the part's file."""
        if self.records:
            return self._read_records(part, first, count)
        keys = self.keys(part, first - self.rows[part], count)
        columns = [(name, spec["dtype"],
                    self._dataset(part, self.names[name])[first:first + count])
                   for name, spec in self.fields.items()]
        samples = []
        for row, key in enumerate(keys):
            sample = {KEY: key}
            for name, dtype, column in columns:
                value = column[row]
                if dtype == "bytes":
                    if value.size:
                        sample[name] = value.tobytes()
                elif name == "cls":
                    sample[name] = int(value)
                else:
                    sample[name] = np.asarray(value)
            samples.append(sample)
        return samples

    def _read_records(self, part: int, first: int, count: int) -> list[dict]:
        """Samples of a dump stored as records (one file, never appended to): the
        records they cover, read at once and split into one array per field."""
        layout = self.records
        window, stride = layout["window"] or 0, layout["stride"] or 1
        start = first * stride
        rows = self._dataset(part, layout["dataset"])[
            start:start + (count - 1) * stride + max(window, 1)]
        columns = {name: np.ascontiguousarray(rows[member])
                   for name, member in layout["members"].items()}
        labels = (self._dataset(part, "cls")[first:first + count].tolist()
                  if "cls" in self.fields else None)
        keys, samples = index_keys(first, count), []
        for i in range(count):
            at = i * stride
            sample = {KEY: keys[i]}
            for name, column in columns.items():
                # a copy per window: overlapping windows must not share memory
                sample[name] = (column[at:at + window].copy() if window
                                else np.asarray(column[at]))
            if labels is not None:
                sample["cls"] = labels[i]
            samples.append(sample)
        return samples

    def checksum(self, part: dict) -> tuple[int, int]:
        """The samples a part holds and the CRC-32 of its data, as the writer computed
        it: over its records and class ids, or over its columns."""
        rows, crc, _ = self.checksums(part)
        return rows, crc

    def checksums(self, part: dict) -> tuple[int, int, int | None]:
        """As `checksum`, and for records the CRC-32 of their values as a reader gets
        them (packer.sample.values_crc32), which a part records as `values_crc32`."""
        if not self.records:
            columns = self.columns(part)
            return min(len(c) for c in columns.values()), columns_crc32(columns), None
        start, stop = part["records"]
        records = self._dataset(part["index"], self.records["dataset"])[start:stop]
        crc, values = crc32(records.view(np.uint8)), values_crc32(records)
        if "cls" not in self.fields:
            return part["count"], crc, values
        labels = self._dataset(part["index"], "cls")[part["first"]:part["first"] + part["count"]]
        return len(labels), crc32(labels, crc), values

    def columns(self, part: dict) -> dict[str, np.ndarray]:
        """A part's samples as the columns they were written from."""
        first = self.rows[part["index"]]
        return {name: self._dataset(part["index"], self.names[name])[first:first + part["count"]]
                for name in self.fields}


def _open(path: Path) -> h5py.File:
    try:
        return h5py.File(path, "r")
    except OSError as err:
        raise DatasetError(f"{path}: cannot open the HDF5 file: {err}") from None
