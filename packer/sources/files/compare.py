"""`packer verify --against FOLDER`: packed samples compared with the folder they were
packed from, and every file of the folder packed or listed as skipped."""

from pathlib import Path

from packer.manifest import layout_label
from packer.sample import KEY, restored_path
from packer.sources.files.options import FolderOptions


class Against:
    """Compares packed samples with the source folder they came from."""

    def __init__(self, manifest: dict, source: Path):
        self.source = source
        self.label = layout_label(manifest)
        self.classes = manifest.get("classes") or []
        self.by_folder = manifest["source"]["labels"] == "folders"
        self.class_level = 1 if manifest["source"].get("split_folders") else 0  # train/CLASS/
        self.seen: set[str] = set()

    def check(self, sample: dict) -> list[str]:
        problems = []
        for field, value in sample.items():
            if field in (KEY, self.label):
                continue
            rel = restored_path(sample[KEY], field)
            self.seen.add(rel)
            try:
                original = (self.source / rel).read_bytes()
            except OSError as err:
                problems.append(f"{rel}: packed, but cannot read the source file: {err.strerror}")
                continue
            if original != value:
                problems.append(f"{rel}: packed bytes differ from the source file")
            if self.by_folder and self.classes[sample[self.label]] != rel.split("/")[
                    self.class_level]:
                problems.append(f"{rel}: class {self.classes[sample[self.label]]!r}, but the "
                                "file is in another class folder")
        return problems

    def unaccounted(self, manifest: dict) -> list[str]:
        """Source files neither packed nor listed as skipped or ignored."""
        scan = FolderOptions.of(manifest["options"]).scan(self.source)
        listed = {e["path"] for e in manifest["skipped"] + manifest["ignored"]}
        listed |= {e["path"] for e in scan.notes.skipped + scan.notes.ignored}
        return [f"{p}: in the source but neither packed nor listed as skipped"
                for s in scan.samples() for _, p in s.files
                if p not in self.seen and p not in listed]
