"""Per-column count, mean, std, min and max, merged chunk by chunk (Chan et al.'s
pairwise update, in float64), so memory does not grow with the rows."""

import numpy as np


class RunningStats:
    def __init__(self, columns: int):
        self.count = np.zeros(columns, np.int64)
        self.mean = np.zeros(columns)
        self.m2 = np.zeros(columns)
        self.min = np.full(columns, np.inf)
        self.max = np.full(columns, -np.inf)

    def set_categorical(self, column: int, remap: np.ndarray, counts: np.ndarray) -> None:
        """Stats of a categorical column from how often each category occurred (its
        values are category ids after `remap`)."""
        by_id = np.zeros(len(remap))
        by_id[remap] = counts[:len(remap)] if len(counts) else 0
        total = by_id.sum()
        ids = np.arange(len(remap), dtype=np.float64)
        mean = (by_id * ids).sum() / max(total, 1)
        self.count[column], self.mean[column] = int(total), mean
        self.m2[column] = (by_id * (ids - mean) ** 2).sum()
        used = np.flatnonzero(by_id)
        self.min[column], self.max[column] = ((used[0], used[-1]) if len(used)
                                              else (np.inf, -np.inf))

    def add(self, block: np.ndarray) -> None:
        """Add a (rows, columns) block; NaN cells are left out."""
        if not len(block):
            return
        nan = np.isnan(block)
        if not nan.any():  # the common case: one pass per statistic, no masks
            mean = block.mean(axis=0, dtype=np.float64)
            m2 = ((block - mean) ** 2).sum(axis=0)
            self.merge(np.full(block.shape[1], len(block), np.int64), mean, m2)
            self.min = np.minimum(self.min, block.min(axis=0))
            self.max = np.maximum(self.max, block.max(axis=0))
            return
        valid = ~nan
        count = valid.sum(axis=0)
        if not count.any():
            return
        values = np.where(valid, block, 0.0).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(count > 0, values.sum(axis=0) / count, 0.0)
        m2 = (np.where(valid, values - mean, 0.0) ** 2).sum(axis=0)
        self.merge(count, mean, m2)
        self.min = np.minimum(self.min, np.where(valid, block, np.inf).min(axis=0))
        self.max = np.maximum(self.max, np.where(valid, block, -np.inf).max(axis=0))

    def merge(self, count, mean, m2) -> None:
        total = self.count + count
        with np.errstate(invalid="ignore", divide="ignore"):
            delta = mean - self.mean
            share = np.where(total > 0, count / np.maximum(total, 1), 0.0)
            self.mean = self.mean + delta * share
            self.m2 = self.m2 + m2 + delta ** 2 * self.count * share
        self.count = total

    def fill(self, missing: np.ndarray, values: np.ndarray) -> None:
        """Account for `missing[j]` cells of column j filled with `values[j]`."""
        self.merge(missing, values, np.zeros(len(values)))
        some = missing > 0
        self.min = np.where(some, np.minimum(self.min, values), self.min)
        self.max = np.where(some, np.maximum(self.max, values), self.max)

    @property
    def std(self) -> np.ndarray:
        """The population standard deviation (ddof=0), as numpy's default."""
        return np.sqrt(self.m2 / np.maximum(self.count, 1))

    def summary(self, names: list[str]) -> dict:
        def number(value):
            return float(value) if np.isfinite(value) else None

        return {name: {"count": int(self.count[j]), "mean": number(self.mean[j]),
                       "std": number(self.std[j]), "min": number(self.min[j]),
                       "max": number(self.max[j])}
                for j, name in enumerate(names)}


class Float32Exactness:
    """Per column, the whole numbers (ids, counts, seconds) that float32 changes, and
    by how much at most."""

    def __init__(self, columns: int):
        self.inexact = np.zeros(columns, np.int64)
        self.largest_change = np.zeros(columns)

    def add(self, block: np.ndarray, stored: np.ndarray) -> None:
        """A float64 block and its float32 copy."""
        with np.errstate(invalid="ignore"):
            change = np.abs(stored - block)
            inexact = (change > 0) & (block == np.round(block))
        self.inexact += inexact.sum(axis=0)
        if inexact.any():
            self.largest_change = np.fmax(self.largest_change,
                                          np.where(inexact, change, 0).max(axis=0))

    def summary(self, names: list[str]) -> dict:
        return {name: {"values": int(n), "largest_change": float(change)}
                for name, n, change in zip(names, self.inexact, self.largest_change,
                                           strict=True) if n}
