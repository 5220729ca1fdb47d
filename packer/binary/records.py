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
Values stay in the field's own type (native byte order) unless `as_float32=True`
(bytes fields stay uint8).

To split many ranges of records without allocating per range, `columns =
RecordColumns(spec, rows)` holds one array per field: `columns.fill(records, at)`
copies records into rows `at..`, and `columns.rows(n)` gives the first n rows as
`record_arrays` would (views, valid until the next fill).
"""

from dataclasses import dataclass

import numpy as np

from packer.binary.dump import Dump
from packer.binary.spec import Spec
from packer.errors import UsageProblem


def record_arrays(records: np.ndarray, spec: Spec, as_float32: bool = False) -> dict:
    """A structured array of records as {field name: array of shape (n, *field shape)},
    contiguous and in native byte order."""
    arrays = {}
    for field in spec.record.fields:
        if field.kind == "pad":
            continue
        values = records[field.name]
        target = np.float32 if as_float32 and field.kind != "bytes" else values.dtype
        arrays[field.name] = np.ascontiguousarray(values, dtype=np.dtype(target).newbyteorder("="))
    return arrays


class RecordColumns:
    """Reusable per-field arrays for up to `rows` records. In a dump of native byte
    order each field is copied as opaque bytes (no casting: about twice as fast as a
    typed copy of a shaped field); otherwise it is byte-swapped on the way."""

    def __init__(self, spec: Spec, rows: int):
        self.dtype = spec.record_dtype
        self.arrays = {name: np.empty((rows, *self.dtype[name].shape),
                                      self.dtype[name].base.newbyteorder("="))
                       for name in self.dtype.names}
        if self.dtype.isnative:
            self.dtype = _opaque(self.dtype)
            self.targets = {name: np.ndarray(rows, self.dtype[name], array)
                            for name, array in self.arrays.items()}
        else:
            self.targets = self.arrays

    def fill(self, records: np.ndarray, at: int = 0) -> None:
        """Copies records (in the spec's byte order) into rows at..at+len(records)-1."""
        stop = at + len(records)
        records = records.view(self.dtype)
        for name, target in self.targets.items():
            np.copyto(target[at:stop], records[name])

    def rows(self, count: int) -> dict:
        """The first `count` rows as {field name: (count, *field shape)}."""
        return {name: array[:count] for name, array in self.arrays.items()}


def _opaque(dtype: np.dtype) -> np.dtype:
    """The structured dtype with each field as raw bytes of the same size and offset."""
    names = dtype.names
    return np.dtype({"names": names, "formats": [f"V{dtype[n].itemsize}" for n in names],
                     "offsets": [dtype.fields[n][1] for n in names],
                     "itemsize": dtype.itemsize})


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
