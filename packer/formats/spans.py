"""A column of values that lie one after another in one buffer, as a reader may give
a window of samples: a tar reader reads a window's runs into one of a DataLoader
worker's shared slots, and each value is where it lies there, with no copy of its
own (packer.formats.webdataset.tarindex, packer.read.batches)."""

from typing import NamedTuple

import numpy as np


class Spans(NamedTuple):
    """Where each value of a column starts and ends in `buffer`."""

    buffer: np.ndarray  # uint8
    starts: np.ndarray
    ends: np.ndarray

    def value(self, i: int) -> bytes:
        return self.buffer[self.starts[i]:self.ends[i]].tobytes()
