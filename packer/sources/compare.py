"""`packer verify --against SOURCE` for tables, binary dumps and folders of binary files:
the source is read again with the options the manifest recorded, and each packed
sample is compared, field by field, with the sample the source gives now.

Samples of a table or a dump are compared in the order they were packed, a block of
samples read from the source at a time (never a read per sample); a folder of binary
files is compared file by file, as the files source is.
"""

from pathlib import Path

import numpy as np

from packer.errors import PackerError, UsageProblem
from packer.manifest import layout_label
from packer.sample import KEY, SIDECAR_FIELDS, field_bytes

BLOCK_SAMPLES = 4096  # samples read from the source at a time


def recorded_spec(manifest: dict) -> str:
    """The spec a binary dataset was packed with, as its manifest records it."""
    return manifest["source"].get("spec") or manifest["options"]["spec"]


def _plain(name: str, value):
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
                    if name != KEY and name in expected and expected[name] != _plain(name, value)]
        problems += [f"{where}: field {name} is in {self.path} but was not packed"
                     for name in expected if name not in sample]
        return problems

    def unaccounted(self, manifest: dict) -> list[str]:
        if self.source.count > self.position:
            return [f"{self.path}: gives {self.source.count:,} samples, {self.position:,} "
                    f"were packed; samples {self.position:,}.. are in the source only"]
        return []


class Folder:
    """Compares each packed sample of a folder of binary files with its file, read
    again with the spec; every file packed or listed as skipped."""

    def __init__(self, manifest: dict, folder: Path):
        from packer.sources.binary.options import BinaryOptions
        from packer.sources.binary.source import BinaryFolder

        if not folder.is_dir():
            raise UsageProblem(f"--against {folder}: not a folder; this dataset was packed "
                               "from a folder of binary files, so --against takes that folder")
        options = BinaryOptions.of(manifest["options"])
        self.folder = folder
        self.source = BinaryFolder(folder, recorded_spec(manifest), options)
        self.label = layout_label(manifest)
        self.files = {s.key: s for s in self.source.scan.samples()}
        self.seen: set[str] = set()

    def check(self, sample: dict) -> list[str]:
        from packer.sources.binary.source import file_fields

        found = self.files.get(sample[KEY])
        if found is None:
            return [f"sample {sample[KEY]!r}: packed, but {self.folder} has no such file now"]
        problems, expected = [], {}
        for field, rel in found.files:
            self.seen.add(rel)
            if field.lower() in SIDECAR_FIELDS:  # notes beside a file, packed as bytes
                expected[field] = (self.folder / rel).read_bytes()
                continue
            try:
                expected.update(file_fields(self.folder / rel, self.source.spec,
                                            self.source.tail))
            except PackerError as err:
                problems.append(f"{rel}: packed, but it does not read with the spec now: {err}")
                continue
        if self.label and found.label is not None:
            expected[self.label] = found.label
        problems += [f"{found.files[0][1]}: field {name} differs from the source file"
                     for name, value in sample.items()
                     if name != KEY and name in expected and expected[name] != _plain(name, value)]
        return problems

    def unaccounted(self, manifest: dict) -> list[str]:
        listed = {e["path"] for e in manifest["skipped"] + manifest["ignored"]}
        notes = self.source.scan.notes
        listed |= {e["path"] for e in notes.skipped + notes.ignored}
        return [f"{rel}: in the source but neither packed nor listed as skipped"
                for sample in self.files.values() for _, rel in sample.files
                if rel not in self.seen and rel not in listed]


def dump_against(manifest: dict, path: Path) -> InOrder:
    from packer.sources.binary.options import BinaryOptions
    from packer.sources.binary.source import BinaryDump

    wanted_file(path, "a binary dump")
    options = BinaryOptions.of(manifest["options"])
    what = "window" if options.window else "record"
    return InOrder(BinaryDump(path, recorded_spec(manifest), options), path, what)


def table_against(manifest: dict, path: Path) -> InOrder:
    from packer.sources.tables.options import TableOptions
    from packer.sources.tables.source import TableSource

    wanted_file(path, "a table")
    return InOrder(TableSource(path, TableOptions.of(manifest["options"])), path, "row")
