"""`packer verify --against` for the binary kind: a dump's records (or windows) compared
in order with those packed, read again with the spec and options the manifest
recorded; a folder of binary files compared file by file, as the files kind does."""

from pathlib import Path

from packer.errors import PackerError, UsageProblem
from packer.manifest import layout_label
from packer.sample import KEY, SIDECAR_FIELDS
from packer.sources.binary.options import BinaryOptions
from packer.sources.binary.source import BinaryDump, BinaryFolder, file_fields
from packer.sources.compare import InOrder, plain_value, wanted_file


def recorded_spec(manifest: dict) -> str:
    """The spec a binary dataset was packed with, as its manifest records it."""
    return manifest["source"].get("spec") or manifest["options"]["spec"]


class Folder:
    """Compares each packed sample of a folder of binary files with its file, read
    again with the spec; every file packed or listed as skipped."""

    def __init__(self, manifest: dict, folder: Path):
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
                     if name != KEY and name in expected
                     and expected[name] != plain_value(name, value)]
        return problems

    def unaccounted(self, manifest: dict) -> list[str]:
        listed = {e["path"] for e in manifest["skipped"] + manifest["ignored"]}
        notes = self.source.scan.notes
        listed |= {e["path"] for e in notes.skipped + notes.ignored}
        return [f"{rel}: in the source but neither packed nor listed as skipped"
                for sample in self.files.values() for _, rel in sample.files
                if rel not in self.seen and rel not in listed]


def dump_against(manifest: dict, path: Path) -> InOrder:
    wanted_file(path, "a binary dump")
    options = BinaryOptions.of(manifest["options"])
    what = "window" if options.window else "record"
    return InOrder(BinaryDump(path, recorded_spec(manifest), options), path, what)
