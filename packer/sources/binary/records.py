"""From records to samples: per-field arrays, and windows of records.

How a dump becomes samples (for the packing of binary dumps):

- One record per sample: read a range of records with `Dump.records(start, n)` (or
  every record with `Dump.chunks()`), turn it into `arrays = record_arrays(records,
  spec)`, and sample `i` of the range is `{name: arrays[name][i] for name in arrays}`:
  one array per field, with the field's shape (`accel` of shape `[3]` gives a (3,)
  array, a scalar field a 0-d array). Padding fields are left out.
- A window of records per sample (`--window N --stride S`): `windows =
  Windows(dump.count, N, S)`; window `i` covers records `windows.bounds(i)`, i.e.
  `i*S .. i*S+N-1`, and becomes `{name: arrays[name][start:stop]}`, arrays of shape
  `(N, *field shape)` (a window of 128 IMU records gives `accel` of shape (128, 3)).
  `window_arrays(dump, windows, first, n)` reads windows `first..first+n-1` in one
  read and returns them stacked, `(n, N, *field shape)` per field. Records after the
  last whole window (`windows.uncovered`) belong to no sample.

Each field can then be stored as an `npy` field of the sample (e.g. `accel.npy`).
Values stay in the field's own type (native byte order; 24-bit i3/u3 widened to
int32/uint32) unless `as_float32=True` (bytes fields stay uint8).

"""

from dataclasses import dataclass

import numpy as np

from packer.errors import UsageProblem
from packer.sources.binary.dump import Dump
from packer.sources.binary.spec import Spec


def record_arrays(records: np.ndarray, spec: Spec, as_float32: bool = False) -> dict:
    """A structured array of records as {field name: array of shape (n, *field shape)},
    contiguous and in native byte order."""
    arrays = {}
    for field in spec.record.fields:
        if field.kind == "pad":
            continue
        values = field.values(records[field.name])
        target = np.float32 if as_float32 and field.kind != "bytes" else values.dtype
        arrays[field.name] = np.ascontiguousarray(values, dtype=np.dtype(target).newbyteorder("="))
    return arrays


@dataclass(frozen=True)
class Windows:
    """Windows of `size` records every `stride` records over `records` records."""

    records: int
    size: int
    stride: int

    def __post_init__(self):
        if self.size < 1 or self.stride < 1:
            raise UsageProblem(f"--window {self.size} --stride {self.stride}: both must be "
                               f"1 or more")

    @property
    def count(self) -> int:
        return 0 if self.records < self.size else (self.records - self.size) // self.stride + 1

    @property
    def uncovered(self) -> int:
        """Records after the end of the last window."""
        return self.records - (self.bounds(self.count - 1)[1] if self.count else 0)

    def bounds(self, i: int) -> tuple[int, int]:
        """The record range [start, stop) of window i."""
        if not 0 <= i < self.count:
            raise IndexError(f"window {i} of {self.count}")
        return i * self.stride, i * self.stride + self.size


def window_arrays(dump: Dump, windows: Windows, first: int, count: int,
                  as_float32: bool = False) -> dict:
    """Windows first..first+count-1 as {field name: array (count, size, *field shape)},
    read from the dump in one range."""
    start = windows.bounds(first)[0]
    stop = windows.bounds(first + count - 1)[1]
    arrays = record_arrays(dump.records(start, stop - start), dump.spec, as_float32)
    return {name: _stack_windows(values, windows) for name, values in arrays.items()}


def _stack_windows(values: np.ndarray, windows: Windows) -> np.ndarray:
    views = np.lib.stride_tricks.sliding_window_view(values, windows.size, axis=0)
    # sliding_window_view puts the window axis last; samples want it right after the first.
    return np.ascontiguousarray(np.moveaxis(views, -1, 1)[::windows.stride])
