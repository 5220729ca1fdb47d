"""The `tables` source: a CSV, TSV, Excel or Parquet table, one sample per row.

A sample is `{"__key__": key, "npy": float32 (F,), "cls": int}` (or `"target.npy"`,
float32, for --task regress and for several label columns). Keys are the
--key-column's values, or the data row number zero-padded to 10 digits.

Opening the source reads the whole table once, a chunk of rows at a time
(packer.sources.tables.scan): every cell is converted and checked, text labels and
--categorical values collect their names, per-feature statistics are merged, and the
converted rows are spooled to a temporary folder as raw float32. So every error
surfaces before any output exists, memory does not grow with the rows, and packing
then reads the spool: contiguous slices, no second parse. A format that takes COLUMNS
(HDF5) gets the spool as blocks of columns (`features` (N, F) float32, `labels`); the
others row by row.
"""

import hashlib
import json
import shutil
import tempfile
import time
import weakref
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from packer.errors import PackerError, UsageProblem
from packer.sample import COLUMNS, SAMPLES, column_samples, columns_crc32, index_key
from packer.sources.base import Source
from packer.sources.tables.convert import NA_POLICIES, TASKS, choose_columns
from packer.sources.tables.readers import open_table
from packer.sources.tables.scan import TableScan

SAMPLE_ROWS = 10_000  # rows that decide which columns are numeric
BLOCK_BYTES = 4 << 20  # bytes of features per block of columns


class TableSource(TableScan, Source):
    """One table, checked and spooled; picklable (workers read the spool). A table
    keyed by its row numbers is also offered as blocks of columns."""

    kind = "table"
    key_dataset = "keys"

    @property
    def attrs(self) -> dict:
        """What a format that keeps attributes records: the feature columns' names."""
        return {"feature_names": list(self.features)}

    @property
    def SHAPES(self) -> tuple[str, ...]:  # noqa: N802 (the protocol's name)
        return (COLUMNS, SAMPLES) if self.implicit_keys else (SAMPLES,)

    def __init__(self, path: Path, options):
        self.path = Path(path)
        self.na = options.na or "fail"
        self.task = options.task or "classify"
        if self.na not in NA_POLICIES or self.task not in TASKS:
            raise UsageProblem(f"--na {self.na} / --task {self.task}: use --na "
                               f"{'|'.join(NA_POLICIES)} and --task {'|'.join(TASKS)}")
        self.table = open_table(self.path, sheet=options.sheet, header_row=options.header_row,
                                skip_rows=options.skip_rows, delimiter=options.delimiter,
                                encoding=options.encoding, decimal=options.decimal)
        sample = self.table.head(SAMPLE_ROWS)
        if sample.empty:
            raise PackerError(f"{self.path}: the header (row {self.table.header_row}) is "
                              "followed by no data rows")
        self.cols = choose_columns(self.table.names, sample, options, self.path,
                                   self.table.thousands)
        del sample
        self.features = self.cols.features
        self.labels = self.cols.labels
        self.multi = len(self.labels) > 1
        self.classify = bool(self.labels) and self.task == "classify" and not self.multi
        if options.task == "regress" and not self.labels:
            raise UsageProblem("--task regress needs --label-column")
        self.spool = Path(tempfile.mkdtemp(prefix="packer-table-"))
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(self.spool), True)
        began = time.perf_counter()
        self._scan()
        self.scan_seconds = round(time.perf_counter() - began, 3)
        stat = self.path.stat()
        self.input_bytes = stat.st_size
        self.scan_skipped: list[dict] = []
        self.fingerprint = hashlib.sha256(json.dumps(
            [str(self.path.resolve()), stat.st_size, stat.st_mtime_ns]).encode()).hexdigest()
        self.table_info = self.table.table_facts()
        del self.table  # an Excel sheet is held whole; the spool is all that is needed now

    # -- reading the spool ---------------------------------------------------------------

    @property
    def field_specs(self) -> dict[str, dict]:
        specs = {"npy": {"dtype": "float32", "shape": [len(self.features)],
                         "dataset": "features"}}
        if self.classify:
            specs["cls"] = {"dtype": "int64", "dataset": "labels"}
        elif self.labels:
            specs["target.npy"] = {"dtype": "float32",
                                   "shape": [len(self.labels)] if self.multi else [],
                                   "dataset": "labels"}
        return specs

    def columns(self, first: int, count: int) -> dict[str, np.ndarray]:
        F = len(self.features)
        features = np.fromfile(self.spool / "features", np.float32, count=count * F,
                               offset=first * F * 4).reshape(count, F)
        for j, remap in self.cat_remap.items():
            column = features[:, j]
            known = ~np.isnan(column)
            column[known] = remap[column[known].astype(np.int64)]
        if self.fill is not None:
            features = np.where(np.isnan(features), self.fill, features)
        columns = {"npy": features}
        if self.classify:
            ids = np.fromfile(self.spool / "labels", np.int64, count=count, offset=first * 8)
            columns["cls"] = self.class_remap[ids]
        elif self.labels:
            K = len(self.labels)
            target = np.fromfile(self.spool / "labels", np.float32, count=count * K,
                                 offset=first * K * 4)
            columns["target.npy"] = target.reshape(count, K) if self.multi else target
        return columns

    def keys(self, first: int, count: int) -> list[str]:
        if not self.cols.key:
            rows = np.fromfile(self.spool / "rows", np.int64, count=count, offset=first * 8)
            return [index_key(r) for r in rows.tolist()]
        ends = np.fromfile(self.spool / "key_offsets", np.int64, count=count + 1,
                           offset=first * 8)
        with open(self.spool / "keys", "rb") as file:
            file.seek(int(ends[0]))
            data = file.read(int(ends[-1] - ends[0]))
        cuts = ends - ends[0]
        return [data[a:b].decode() for a, b in zip(cuts[:-1], cuts[1:], strict=True)]

    def jobs(self, start: int, size: int, check: str) -> Iterator[tuple]:
        for first in range(start, self.count, size):
            yield self, first, min(size, self.count - first)

    def source_record(self, options) -> dict:
        return {
            "source": {"kind": "table", "path": str(self.path.resolve()), **self.table_info,
                       "rows": self.rows, "samples": self.count, "bytes": self.input_bytes,
                       "labels": self.label_source, "task": self.task if self.labels else None,
                       "label_columns": self.labels, "key_column": self.cols.key,
                       "scan_seconds": self.scan_seconds},
            "table": {
                "features": self.features, "stats": self.stats,
                "label_columns": self.labels,
                "targets": self.labels if self.labels and not self.classify else None,
                "categorical": {name: cats.names() for name, cats in self.categories.items()},
                "date_columns": self.cols.dates, "left_out": self.cols.left_out,
                "date_origins": {name: pd.Timestamp(origin, unit="s", tz="UTC").isoformat()
                                 for name, origin in self.date_origins.items()},
                "float32_inexact": self.exactness.summary(self.features),
                "na": {"policy": self.na, "rows": self.na_rows,
                       "unlabelled_rows": self.unlabelled_rows,
                       "cells": {name: int(n) for name, n in zip(self.features, self.na_cells,
                                                                  strict=True) if n}}}}

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "_cleanup"}

    def blocks(self, start: int) -> Iterator[tuple[dict[str, np.ndarray], int]]:
        """The rows from `start` on as blocks of columns, with their columns_crc32."""
        size = max(1, BLOCK_BYTES // (4 * max(1, len(self.features))))
        for first in range(start, self.count, size):
            columns = self.columns(first, min(size, self.count - first))
            yield columns, columns_crc32(columns)


def read_job(job: tuple) -> list[tuple[dict, list]]:
    """A run of rows as samples (the SAMPLES shape)."""
    source, first, count = job
    return column_samples(source.keys(first, count), source.columns(first, count))
