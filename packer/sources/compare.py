"""`packer verify --against SOURCE` for a source whose samples have an order (a table,
a binary dump): the source is read again with the options the manifest recorded, and
each packed sample is compared, field by field, with the sample the source gives now,
in the order they were packed, a block of samples read from the source at a time
(never a read per sample). The kinds' own comparers (packer/sources/*/compare.py) use
it.
"""

from pathlib import Path

import numpy as np

from packer.errors import UsageProblem
from packer.sample import KEY, field_bytes

BLOCK_SAMPLES = 4096  # samples read from the source at a time


def plain_value(name: str, value):
    """A packed field as the bytes (or class id) it was packed from: formats that store
    arrays read them back as arrays."""
    if isinstance(value, bytes | int):
        return value
    return int(value) if name == "cls" else field_bytes(np.asarray(value))


def wanted_file(against: Path, what: str) -> None:
    if not against.is_file():
        raise UsageProblem(f"--against {against}: not a file; this dataset was packed from "
                           f"{what}, so --against takes that file")


class InOrder:
    """Compares samples, in packing order, with a source that gives `columns(first,
    count)` and `keys(first, count)` (a table, a dump)."""

    def __init__(self, source, path: Path, what: str):
        self.source, self.path, self.what = source, path, what
        self.position, self.block_start, self.block = 0, 0, None

    def _expected(self, index: int) -> tuple[str, dict]:
        start = self.block_start
        if self.block is None or not start <= index < start + len(self.block[0]):
            count = min(BLOCK_SAMPLES, self.source.count - index)
            self.block_start = index
            self.block = (self.source.keys(index, count), self.source.columns(index, count))
        keys, columns = self.block
        offset = index - self.block_start
        fields = {name: (int(values[offset]) if name == "cls" else
                         field_bytes(np.asarray(values[offset])))
                  for name, values in columns.items()}
        return keys[offset], fields

    def check(self, sample: dict) -> list[str]:
        index, self.position = self.position, self.position + 1
        if index >= self.source.count:
            return [f"sample {sample[KEY]!r}: packed, but {self.path} now gives only "
                    f"{self.source.count:,} samples"]
        key, expected = self._expected(index)
        if key != sample[KEY]:
            return [f"sample {index:,}: packed as {sample[KEY]!r}, but {self.what} {index:,} "
                    f"of {self.path} has the key {key!r}"]
        where = f"sample {key!r} ({self.what} {index:,} of those packed)"
        problems = [f"{where}: field {name} differs from {self.path}"
                    for name, value in sample.items()
                    if name != KEY and name in expected
                    and expected[name] != plain_value(name, value)]
        problems += [f"{where}: field {name} is in {self.path} but was not packed"
                     for name in expected if name not in sample]
        return problems

    def unaccounted(self, manifest: dict) -> list[str]:
        if self.source.count > self.position:
            return [f"{self.path}: gives {self.source.count:,} samples, {self.position:,} "
                    f"were packed; samples {self.position:,}.. are in the source only"]
        return []
