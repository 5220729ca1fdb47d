"""The `tables` source: a CSV, TSV, Excel or Parquet table, one sample per row.

A sample is `{"__key__": key, "npy": float32 (F,), "cls": int}` (or `"target.npy"`,
float32, for --task regress and for several label columns). Keys are the
--key-column's values, or the data row number zero-padded to 10 digits.

Opening the source reads the whole table once, a chunk of rows at a time: every
cell is converted and checked, text labels and --categorical values collect their
names, per-feature statistics are merged, and the converted rows are spooled to a
temporary folder as raw float32. So every error surfaces before any output exists,
memory does not grow with the rows, and packing then reads the spool: contiguous
slices, no second parse. A format that takes COLUMNS (HDF5) gets the
spool as blocks of columns (`features` (N, F) float32, `labels`); the others row by row.
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
from packer.sample import COLUMNS, KEY, SAMPLES, columns_crc32, index_key
from packer.sources.base import Source
from packer.sources.tables.convert import (
    NA_POLICIES,
    TASKS,
    Categories,
    bad_cells_message,
    choose_columns,
    first_problems,
    in_float32,
    to_numbers,
    to_seconds,
)
from packer.sources.tables.keys import check_unique_keys, key_texts
from packer.sources.tables.readers import open_table
from packer.sources.tables.stats import Float32Exactness, RunningStats

CHUNK_CELLS = 1 << 18  # cells parsed at a time (16,384 rows of 16 columns): bounds memory
SAMPLE_ROWS = 10_000  # rows that decide which columns are numeric
BLOCK_BYTES = 4 << 20  # bytes of features per block of columns


def _mostly_text(series: pd.Series) -> bool:
    """Whether most filled cells of `series` are not numbers."""
    filled = series.dropna()
    return bool(len(filled)) and pd.to_numeric(filled, errors="coerce").isna().mean() > 0.5


class TableSource(Source):
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

    def _nothing_left_text(self) -> str:
        """Why --na drop left no row: the feature columns that hold no number at all (text
        columns, most likely), else those with the most gaps, and the unlabelled rows."""
        empty = [name for name, n in zip(self.features, self.na_cells, strict=True)
                 if n == self.rows]
        gappy = sorted(((int(n), name) for name, n in zip(self.features, self.na_cells,
                                                          strict=True) if n), reverse=True)
        if empty:
            shown = ", ".join(repr(name) for name in empty[:5])
            verb = "hold" if len(empty) > 1 else "holds"
            why = (f"{shown} {verb} no number in any row (text?): --categorical NAME maps "
                   "a text column to ids, --drop-columns NAME leaves it out")
        elif gappy:
            why = "the most empty or non-numeric cells: " + ", ".join(
                f"{name!r} ({n:,})" for n, name in gappy[:5])
        else:
            why = f"{self.unlabelled_rows:,} rows have no usable label"
        return (f"{self.path}: --na drop left no rows: each of the {self.rows:,} rows has an "
                f"empty or non-numeric cell; {why}")

    # -- the pass over the table -------------------------------------------------------

    def _scan(self) -> None:
        feats, F = self.features, len(self.features)
        self.categories = {c: Categories() for c in self.cols.categorical}
        cat_counts = {c: np.zeros(0, np.int64) for c in self.cols.categorical}
        label_names = Categories()
        stats = RunningStats(F)
        self.na_cells = np.zeros(F, np.int64)
        self.exactness = Float32Exactness(F)
        self.date_origins: dict[str, float] = {}
        self.na_rows = self.unlabelled_rows = self.rows = self.count = 0
        key_hashes = []
        usecols = list(dict.fromkeys(feats + self.labels + [c for c in [self.cols.key] if c]))
        with (open(self.spool / "features", "wb") as f_out,
              open(self.spool / "labels", "wb") as l_out,
              open(self.spool / "rows", "wb") as r_out,
              open(self.spool / "keys", "wb") as k_out):
            key_offsets = [0]
            rows_per_chunk = max(256, CHUNK_CELLS // max(1, len(usecols)))
            for frame in self.table.chunks(usecols, rows_per_chunk):
                n, offset = len(frame), self.rows
                block = self._plain_block(frame)
                missing = np.zeros(n, bool)
                if block is None:
                    block, missing = self._checked_block(frame, offset, cat_counts)
                labels, label_bad = self._labels(frame, label_names, offset)
                self.na_rows += int(missing.sum())
                self.unlabelled_rows += int((label_bad & ~missing).sum())
                keep = ~(missing | label_bad) if self.na == "drop" else slice(None)
                if self.na == "drop":
                    block = block[keep]
                    labels = labels[keep] if labels is not None else None
                rows = np.arange(offset, offset + n, dtype=np.int64)[keep]
                stats.add(block)
                stored = block.astype(np.float32, order="C")
                self.exactness.add(block, stored)
                stored.tofile(f_out)
                if labels is not None:
                    labels.tofile(l_out)
                rows.tofile(r_out)
                if self.cols.key:
                    keys = key_texts(self.path, self.table, self.cols.key,
                                     frame[self.cols.key], offset)
                    keys = keys[keep] if self.na == "drop" else keys
                    key_hashes.append(pd.util.hash_array(keys))
                    for key in keys:
                        data = key.encode()
                        k_out.write(data)
                        key_offsets.append(key_offsets[-1] + len(data))
                self.rows += n
                self.count += len(rows)
        if not self.rows:
            raise PackerError(f"{self.path}: the header (row {self.table.header_row}) is "
                              "followed by no data rows")
        if not self.count:
            raise PackerError(self._nothing_left_text())
        self._finish_labels(label_names)
        self._finish_stats(stats, cat_counts)
        if self.cols.key:
            np.asarray(key_offsets, np.int64).tofile(self.spool / "key_offsets")
            check_unique_keys(self.path, self.cols.key, self.spool, np.concatenate(key_hashes))
        rows = np.fromfile(self.spool / "rows", np.int64, count=1, offset=(self.count - 1) * 8)
        self.implicit_keys = not self.cols.key and int(rows[0]) == self.count - 1

    def _checked_block(self, frame: pd.DataFrame, offset: int, cat_counts: dict):
        """The features of a chunk, column by column: every cell checked, text mapped
        to ids, dates to seconds; and the mask of rows with a cell that is no number."""
        n = len(frame)
        block = np.empty((n, len(self.features)), np.float64)
        missing = np.zeros(n, bool)
        failing = []  # under --na fail: the columns with bad cells, all named in the error
        for j, name in enumerate(self.features):
            series = frame[name]
            if name in self.categories:
                codes = self.categories[name].codes(series)
                bad = codes < 0
                values = codes.astype(np.float64)
                values[bad] = np.nan
                counts = np.bincount(codes[~bad])
                old = cat_counts[name]
                size = max(len(old), len(counts))
                cat_counts[name] = (np.pad(old, (0, size - len(old)))
                                    + np.pad(counts, (0, size - len(counts))))
            elif name in self.cols.dates:
                values, bad = self._seconds(name, series)
            else:
                values, bad = to_numbers(series, self.table.thousands)
            if bad.any():
                if self.na == "fail":
                    failing.append((name, series, bad))
                self.na_cells[j] += int(bad.sum())
                missing |= bad
            block[:, j] = values
        if failing:
            raise PackerError(bad_cells_message(self.path, self.table, failing, offset,
                                                self.cols.dates))
        return block, missing

    def _seconds(self, name: str, series: pd.Series) -> tuple[np.ndarray, np.ndarray]:
        """Seconds since the column's first date: exact in float32 within 194 days of
        it, where Unix seconds would be rounded to about two minutes."""
        values, bad = to_seconds(series)
        if name not in self.date_origins and (~bad).any():
            self.date_origins[name] = float(values[~bad][0])
        return values - self.date_origins.get(name, 0.0), bad

    def _plain_block(self, frame: pd.DataFrame) -> np.ndarray | None:
        """The features of a chunk in one conversion when they are all numbers with no
        gap (the common case); None when any column needs the cell-by-cell checks."""
        if self.categories or self.cols.dates:
            return None
        columns = frame[self.features]
        if not all(pd.api.types.is_numeric_dtype(t) and not pd.api.types.is_bool_dtype(t)
                   for t in columns.dtypes):
            return None
        block = columns.to_numpy(dtype=np.float64, na_value=np.nan)
        return block if in_float32(block).all() else None

    def _labels(self, frame: pd.DataFrame, names: Categories, offset: int):
        """The chunk's labels (provisional class ids, or float targets) and the mask of
        rows without a usable label."""
        if not self.labels:
            return None, np.zeros(len(frame), bool)
        if self.classify:
            codes = names.codes(frame[self.labels[0]])
            bad = codes < 0
            labels = codes
        else:
            values = np.empty((len(frame), len(self.labels)), np.float64)
            bad = np.zeros(len(frame), bool)
            for j, name in enumerate(self.labels):
                values[:, j], col_bad = to_numbers(frame[name], self.table.thousands)
                if self.multi and self.task == "classify":
                    col_bad |= ~np.isin(values[:, j], (0.0, 1.0))
                bad |= col_bad
            labels = values.astype(np.float32)
            if not self.multi:
                labels = labels[:, 0]
        if bad.any() and self.na != "drop":
            for name in self.labels:
                series = frame[name]
                col_bad = bad & (series.isna().to_numpy() | ~self._label_ok(series))
                if col_bad.any():
                    break
            else:
                col_bad = bad
            what = ("must hold 0 or 1 (several label columns are a multi-hot target)"
                    if self.multi and self.task == "classify" else
                    "is empty" if self.classify else "is not a number")
            problem = first_problems(self.path, self.table, name, frame[name], col_bad,
                                     offset, role="label column")
            if not self.classify and _mostly_text(frame[name]):
                raise PackerError(f"{problem}: the label column {name!r} holds text, and "
                                  "--task regress needs a number in every row; leave out "
                                  "--task regress to take its values as classes")
            raise PackerError(f"{problem}: every row needs a label, and this one {what}; "
                              "pass --na drop to leave such rows out")
        return labels, bad

    def _label_ok(self, series: pd.Series) -> np.ndarray:
        if self.classify:
            return series.notna().to_numpy()
        values, bad = to_numbers(series, self.table.thousands)
        if self.multi and self.task == "classify":
            bad |= ~np.isin(values, (0.0, 1.0))
        return ~bad

    def _finish_labels(self, names: Categories) -> None:
        self.classes = names.names() if self.classify else None
        self.class_remap = names.remap() if self.classify else None
        if self.classify:
            try:
                numbers = [float(n) for n in self.classes]
            except ValueError:
                numbers = None
            if numbers and not all(x.is_integer() for x in numbers):
                raise UsageProblem(f"{self.path}: label column {self.labels[0]!r} holds "
                                   f"{len(numbers):,} distinct numbers that are not all "
                                   "integers; pass --task regress for a float target")
        self.label_source = "column" if self.classify else "none"

    def _finish_stats(self, stats: RunningStats, cat_counts: dict) -> None:
        self.cat_remap = {}
        for name, names in self.categories.items():
            j = self.features.index(name)
            remap = names.remap()
            self.cat_remap[j] = remap.astype(np.float32)
            stats.set_categorical(j, remap, cat_counts[name])
        self.fill = None
        if self.na in ("zero", "mean") and self.na_cells.any():
            self.fill = (np.zeros(len(self.features)) if self.na == "zero"
                         else np.nan_to_num(stats.mean.copy())).astype(np.float32)
            stats.fill(self.na_cells, self.fill.astype(np.float64))
        self.stats = stats.summary(self.features)

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
    columns = source.columns(first, count)
    keys = source.keys(first, count)
    labels = columns.pop("cls", None)
    samples = []
    for i, key in enumerate(keys):
        sample = {KEY: key}
        sample.update((name, np.asarray(column[i])) for name, column in columns.items())
        if labels is not None:
            sample["cls"] = int(labels[i])
        samples.append((sample, []))
    return samples

