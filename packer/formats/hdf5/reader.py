"""The HDF5 reader: runs of samples as slices of every dataset, and the checksums
of parts written whole."""

from pathlib import Path

import h5py
import numpy as np
from isal.isal_zlib import crc32

from packer.errors import DatasetError
from packer.formats.base import ProcessReader
from packer.formats.hdf5.writer import dataset_names
from packer.sample import KEY, columns_crc32, index_key, index_keys, values_crc32


class Reader(ProcessReader):
    """Runs of samples as slices of every dataset; the file is opened once per
    process, lazily, so forked workers never share an HDF5 handle."""

    def __init__(self, path: Path, manifest: dict):
        self.path, self.fields = path, manifest["fields"]
        self.names = dataset_names(manifest)
        self.firsts = [p["first"] for p in manifest["parts"]]
        self.records = manifest.get("records")
        self._check_rows(manifest["count"])

    def _check_rows(self, count: int) -> None:
        """A DatasetError unless every dataset holds the rows `count` samples need."""
        file = self._open_handle(None)
        try:
            if self.records:
                window, stride = self.records["window"] or 0, self.records["stride"] or 1
                needed = {self.records["dataset"]: (count - 1) * stride + max(window, 1)
                          if count else 0}
                needed.update({"cls": count} if "cls" in self.fields else {})
            else:
                needed = {name: count for name in self.names.values() if name is not None}
            for name, rows in needed.items():
                held = self._rows_of(file, name)
                if held is None or held < rows or (held > rows and not self.records):
                    found = "no such dataset" if held is None else f"{held:,} rows"
                    raise DatasetError(f"{self.path}: dataset {name!r} has {found}, but the "
                                       f"manifest's {count:,} samples need {rows:,}; the "
                                       "manifest does not belong to this data (restore it, "
                                       "or pack the source again)")
        finally:
            file.close()

    def _rows_of(self, file: h5py.File, name: str) -> int | None:
        """The rows of dataset `name` (None if there is none); a DatasetError where its
        object header is damaged (h5py raises KeyError or RuntimeError for it)."""
        try:
            return len(file[name]) if name in file else None
        except (KeyError, RuntimeError, OSError) as err:
            raise DatasetError(f"{self.path}: the HDF5 object header of dataset {name!r} is "
                               f"damaged ({err}); restore the file from a copy or pack the "
                               "source again") from None

    def _open_handle(self, inherited) -> h5py.File:
        self._datasets = {}
        try:
            return h5py.File(self.path, "r")
        except OSError as err:
            raise DatasetError(f"{self.path}: cannot open the HDF5 file: {err}") from None

    def _dataset(self, name: str) -> h5py.Dataset:
        """The open file's dataset `name`, looked up once per handle: h5py's lookup costs
        more than reading a run of 64 small samples from it."""
        file = self.handle()
        if name not in self._datasets:
            self._datasets[name] = file[name]
        return self._datasets[name]

    def __getstate__(self):
        return {**super().__getstate__(), "_datasets": {}}

    def read(self, part: int, start: int, count: int) -> list[dict]:
        first = self.firsts[part] + start
        try:
            return self._read(first, count)
        except OSError as err:  # what h5py raises on damaged bytes
            raise DatasetError(f"{self.path}: damaged where samples {first:,} to "
                               f"{first + count - 1:,} are ({err}); `packer verify "
                               f"{self.path}` says where; restore it from a copy or pack "
                               "the source again") from None

    def keys(self, first: int, count: int) -> list[str]:
        """The keys of `count` samples from `first`, no data read."""
        if self.records or self.names[KEY] is None:  # samples keyed by their index
            return index_keys(first, count)
        keys = self._dataset(self.names[KEY])[first:first + count]
        if keys.dtype.kind in "iu":  # an int64 key dataset, as earlier versions wrote
            return [index_key(i) for i in keys.tolist()]
        return [key.decode("utf-8") for key in keys]

    def _read(self, first: int, count: int) -> list[dict]:
        if self.records:
            return self._read_records(first, count)
        keys = self.keys(first, count)
        columns = [(name, spec["dtype"], self._dataset(self.names[name])[first:first + count])
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

    def _read_records(self, first: int, count: int) -> list[dict]:
        """Samples of a dump stored as records: the records they cover, read at once
        and split into one array per field."""
        layout = self.records
        window, stride = layout["window"] or 0, layout["stride"] or 1
        start = first * stride
        rows = self._dataset(layout["dataset"])[start:start + (count - 1) * stride + max(window, 1)]
        columns = {name: np.ascontiguousarray(rows[member])
                   for name, member in layout["members"].items()}
        labels = (self._dataset("cls")[first:first + count].tolist() if "cls" in self.fields
                  else None)
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
        file = self.handle()
        start, stop = part["records"]
        records = file[self.records["dataset"]][start:stop]
        crc, values = crc32(records.view(np.uint8)), values_crc32(records)
        if "cls" not in self.fields:
            return part["count"], crc, values
        labels = file["cls"][part["first"]:part["first"] + part["count"]]
        return len(labels), crc32(labels, crc), values

    def columns(self, part: dict) -> dict[str, np.ndarray]:
        """A part's samples as the columns they were written from."""
        file = self.handle()
        return {name: file[self.names[name]][part["first"]:part["first"] + part["count"]]
                for name in self.fields}
