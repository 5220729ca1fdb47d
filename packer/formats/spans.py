"""A column of values that lie one after another in one buffer, as a reader may give
a window of samples: a tar reader reads a window's runs into one of a DataLoader
worker's shared slots, and each value is where it lies there, with no copy of its
own (packer.formats.webdataset.tarindex, packer.read.handover)."""

from typing import NamedTuple

import numpy as np


class Spans(NamedTuple):
    """Where each value of a column starts and ends in `buffer`."""

    buffer: np.ndarray  # uint8 (or a memoryview of bytes)
    starts: np.ndarray
    ends: np.ndarray

    def value(self, i: int) -> bytes:
        return self.buffer[self.starts[i]:self.ends[i]].tobytes()

    def values(self) -> list[bytes]:
        view = memoryview(self.buffer)
        return list(map(bytes, map(view.__getitem__, map(slice, self.starts.tolist(),
                                                          self.ends.tolist()))))

    def decimals(self) -> np.ndarray | None:
        """The values as int64, where each is 1 to 18 ASCII digits (a class id as packer
        writes it), in a few array operations; None where one is not (int() then reads
        each, and names any that is no integer)."""
        lengths = self.ends - self.starts
        if not len(lengths) or lengths.min() < 1 or lengths.max() > 18:
            return None
        width = int(lengths.max())
        at = self.ends[:, None] - width + np.arange(width)  # each value's last `width` bytes
        inside = at >= self.starts[:, None]
        digits = self.buffer[np.where(inside, at, self.starts[:, None])].astype(np.int64) - 48
        if ((digits < 0) | (digits > 9)).any():
            return None
        digits[~inside] = 0
        return digits @ 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)
