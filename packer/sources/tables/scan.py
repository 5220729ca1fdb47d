"""The one pass over a table that opening a `tables` source makes, a chunk of rows at a
time: every cell converted and checked (text labels and --categorical values collect
their names, dates become seconds), per-feature statistics merged, and the rows that
are kept spooled as raw float32 (features, labels, row numbers, keys), so that every
error surfaces before any output exists and packing reads the spool.

TableScan is TableSource's half that writes the spool: TableSource sets what it was
opened with (path, table, cols, features, labels, na, task, multi, classify, spool)
and calls `_scan()`; the pass leaves rows, count, classes, stats and the --na counts.
"""

import numpy as np
import pandas as pd

from packer.errors import PackerError, UsageProblem
from packer.sources.tables.convert import (
    Categories,
    bad_cells_message,
    first_problems,
    in_float32,
    to_numbers,
    to_seconds,
)
from packer.sources.tables.keys import check_unique_keys, key_texts
from packer.sources.tables.stats import Float32Exactness, RunningStats

CHUNK_CELLS = 1 << 18  # cells parsed at a time (16,384 rows of 16 columns): bounds memory


def _mostly_text(series: pd.Series) -> bool:
    """Whether most filled cells of `series` are not numbers."""
    filled = series.dropna()
    return bool(len(filled)) and pd.to_numeric(filled, errors="coerce").isna().mean() > 0.5


class TableScan:
    """The pass over the table into the spool (see the module's docstring)."""

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
