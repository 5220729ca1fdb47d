"""The `files` source: a folder of files, one sample per file (or per stem group).

Layouts, picked in this order:
- `--labels FILE`, or a `labels.csv` at the top of the folder: a CSV of
  `filename,label` rows; string labels become class ids.
- ImageFolder: the folder holds only sub-folders; each top folder is a class, ids
  in sorted-name order. Notes beside them (README, LICENSE, a .md or .pdf page: tree.py's
  `is_note`) are no samples and leave the layout as it is; they are listed as ignored.
- Split folders: the top folders are all split names (train, val, test ...); they
  are the splits (packer/packing/splits.py), and the folders below them the classes
  (when every split folder holds only folders; otherwise there are no labels).
- otherwise (or `--unlabelled`): no labels.

The folder is walked twice, folder by folder in sorted order: `scan_folder` counts
samples and notes what is skipped, `Scan.samples()` yields the samples for packing.
Only one folder's listing is held at a time, so memory does not grow with the
file count. Regular files are known from the listing and not stat'ed; reading and
checking the bytes happen later, in the packing workers, which also count them
(packer/sources/files/read.py). What is walked is a tree: a folder on disk
(`LocalTree`, tree.py), or the listing of an s3:// prefix (packer/sources/files/objects.py),
so both are taken apart into samples by the same rules.
"""

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path, PurePosixPath

from packer.errors import PackerError
from packer.sample import SIDECAR_FIELDS, disambiguate, encode_key, split_name
from packer.sources.base import Source
from packer.sources.files.labels import label_ids, labels_in_folder, read_labels_file
from packer.sources.files.tree import FILE, NOTE_REASON, LocalTree, is_junk, is_note

SPLIT_FOLDERS = ("train", "val", "valid", "validation", "dev", "test")  # in the splits' order


@dataclass(slots=True)
class SampleFiles:
    """One sample to pack: its key, its files as (field, path relative to root)."""

    key: str
    files: list[tuple[str, str]]
    label: int | None = None


@dataclass
class Notes:
    """What a walk met besides samples: every input not packed, and why."""

    skipped: list[dict] = field(default_factory=list)
    ignored: list[dict] = field(default_factory=list)
    symlinks: int = 0  # followed (with --no-follow-symlinks: found)
    shared_stems: list[str] = field(default_factory=list)
    labelled: set[str] = field(default_factory=set)  # labels-file rows that matched a file


@dataclass
class Scan(Source):
    """A folder, scanned: its layout, labels and sample count (packer.sources.base.Source)."""

    root: Path
    group_by_stem: bool
    follow_symlinks: bool
    label_source: str = "none"  # "folders", "labels-file" or "none"
    classes: list[str] | None = None
    class_ids: dict[str, int] | None = None  # folders: class folder name -> id
    labels: dict[str, int] | None = None  # labels file: relative path -> id
    labels_file: str | None = None
    labels_read: dict | None = None  # the labels file's encoding and header row
    exclude: set[str] = field(default_factory=set)
    count: int = 0
    input_bytes: int = 0  # not known from the listing: packing counts the bytes it reads
    fields: set[str] = field(default_factory=set)
    fingerprint: str = ""
    notes: Notes = field(default_factory=Notes)
    unmatched_labels: list[str] = field(default_factory=list)
    top_files: list[str] = field(default_factory=list)  # beside sub-folders: not an ImageFolder
    split_folders: list[str] | None = None  # train/, val/, test/ at the top: the splits
    class_level: int = 0  # the folder level that names a sample's class (ImageFolder)
    tree: object = None  # what the walk lists: a LocalTree, or an ObjectTree of a prefix

    kind = "files"

    @property
    def path(self) -> Path:
        return self.root

    @property
    def field_specs(self) -> dict[str, dict]:
        specs = {name: {"dtype": "bytes"} for name in sorted(self.fields)}
        if self.label_source != "none":
            specs["cls"] = {"dtype": "int64"}
        return specs

    @property
    def scan_skipped(self) -> list[dict]:
        return self.notes.skipped

    def jobs(self, start: int, size: int, check: str) -> Iterator[tuple]:
        """Picklable units of worker work for the samples from `start` on: `read_job`
        reads each in a worker. Samples travel as (key, files, label) tuples, which
        pickle several times faster than the dataclass."""
        runs = islice(self.samples(), start, None)
        while run := list(islice(runs, size)):
            yield str(self.root), check, [(s.key, s.files, s.label) for s in run]

    def modified_since(self, time_ns: int, count: int) -> str | None:
        """The first of the first `count` samples' files modified after `time_ns`, if any."""
        for sample in islice(self.samples(), count):
            for _, rel_path in sample.files:
                try:
                    if os.stat(self.root / rel_path).st_mtime_ns > time_ns:
                        return str(self.root / rel_path)
                except OSError:
                    return str(self.root / rel_path)
        return None

    def fingerprinted(self, sample: SampleFiles) -> tuple:
        """What the fingerprint of the listing takes of a sample (a resumed pack refuses
        another fingerprint; a file edited in place, `modified_since`)."""
        return sample.files, sample.label

    def where(self) -> str:
        """The source as the manifest names it."""
        return str(self.root.resolve())

    def source_record(self, options) -> dict:
        """What the manifest says of this source, beside the common entries."""
        return {
            "source": {"kind": "files", "path": self.where(),
                       "labels": self.label_source, "labels_file": self.labels_file,
                       "labels_read": self.labels_read, "samples": self.count,
                       "bytes": self.input_bytes,
                       "top_files": self.top_files[:5], "top_file_count": len(self.top_files),
                       "split_folders": self.split_folders},
            "ignored": self.notes.ignored,
            "symlinks": {"followed": self.follow_symlinks, "count": self.notes.symlinks},
            "shared_stems": self.notes.shared_stems,
            "unmatched_labels": self.unmatched_labels,
        }

    def samples(self, notes: Notes | None = None) -> Iterator[SampleFiles]:
        """Every sample in order; what is skipped on the way goes to `notes`."""
        notes = notes if notes is not None else Notes()
        walk = _walk(self, self.tree.top(), "", notes)
        for folder, files in walk:
            yield from self._folder_samples(folder, files, notes)

    def _folder_samples(self, folder: str, files: list, notes: Notes) -> list[SampleFiles]:
        groups: dict[str, list[tuple[str, str]]] = {}
        for name in files:
            stem, field_name = split_name(name)
            groups.setdefault(folder + stem, []).append((field_name, folder + name))
        samples = []
        for stem_path, members in groups.items():
            key = encode_key(stem_path)
            # x.jpg and x.JPG cannot be one sample: webdataset folds a field's case
            distinct = len({f.lower() for f, _ in members}) == len(members)
            if len(members) == 1 or distinct and (self.group_by_stem
                                                  or _main_files(members) <= 1):
                samples.append(SampleFiles(key, members))
                continue
            notes.shared_stems.append(stem_path)
            samples += [SampleFiles(disambiguate(key, m[0]), [m]) for m in members]
        samples.sort(key=lambda s: s.key)
        if self.label_source == "none":
            return samples
        if any(f.lower() == "cls" for s in samples for f, _ in s.files):
            samples = self._drop_cls_files(samples, notes)
        if self.labels is None:  # ImageFolder: a folder of the path is the class
            levels = folder.split("/")
            if len(levels) <= self.class_level + 1:  # train/x.jpg: in no class folder
                notes.skipped += [{"path": p, "reason": f"directly in the split folder "
                                   f"{levels[0]}/, so in no class (the classes are the "
                                   "folders below the split folders)"}
                                  for s in samples for _, p in s.files]
                return []
            label = self.class_ids[levels[self.class_level]]
            for sample in samples:
                sample.label = label
            return samples
        return [s for s in samples if self._label_from_file(s, notes)]

    def _drop_cls_files(self, samples: list[SampleFiles], notes: Notes) -> list:
        """A `.cls` file would clash with the label the layout gives; list it as skipped."""
        origin = "the class folder" if self.labels is None else Path(self.labels_file).name
        for sample in samples:
            notes.skipped += [{"path": p, "reason": f"a .cls file, but the label comes from "
                               f"{origin}"} for f, p in sample.files if f.lower() == "cls"]
            sample.files = [(f, p) for f, p in sample.files if f.lower() != "cls"]
        return [s for s in samples if s.files]

    def _label_from_file(self, sample: SampleFiles, notes: Notes) -> bool:
        """Label the sample from the labels file; False if it has no row there."""
        names = [p for _, p in sample.files if p in self.labels]
        if not names:
            notes.skipped += [{"path": p, "reason": f"no label in {Path(self.labels_file).name}"}
                              for _, p in sample.files]
            return False
        notes.labelled.update(names)
        sample.label = self.labels[names[0]]
        return True


def _main_files(members: list[tuple[str, str]]) -> int:
    """How many of a stem's files are not sidecars."""
    return sum(field_name.lower() not in SIDECAR_FIELDS for field_name, _ in members)


def _walk(scan: Scan, handle, rel: str, notes: Notes) -> Iterator:
    """(relative folder with trailing slash, [file name, ...]) for each folder."""
    entries = scan.tree.entries(handle, rel, notes)
    files, subfolders = [], []
    for name, entry in entries:
        rel_path = f"{rel}{name}"
        if is_junk(name):
            notes.ignored.append({"path": rel_path, "reason": "hidden file or OS junk"})
            continue
        if rel_path in scan.exclude:
            continue
        found = scan.tree.kind(handle, entry, rel_path, notes)
        if found == FILE:
            files.append(name)
        elif found is not None:
            subfolders.append((name, found))
    del entries  # a big folder's entries hold stat results; free them before going on
    if not rel and scan.split_folders:  # train/ first: --dedupe keeps the training copy
        subfolders.sort(key=lambda item: split_rank(item[0]))
    if files:
        yield rel, files
    for name, sub in subfolders:
        yield from _walk(scan, sub, f"{rel}{name}/", notes)


def scan_folder(root: Path, *, labels: Path | None = None, unlabelled: bool = False,
                group_by_stem: bool = False, follow_symlinks: bool = True,
                labels_encoding: str | None = None) -> Scan:
    """Decide the layout, then count the samples in one pass over the folder."""
    root = Path(root)
    if not root.is_dir():
        raise PackerError(f"{root}: not a folder")
    scan = Scan(root, group_by_stem, follow_symlinks, tree=LocalTree(root, follow_symlinks))
    in_folder = labels is None and not unlabelled and labels_in_folder(root)
    if in_folder:
        labels = in_folder
    if labels is not None:
        found = read_labels(labels, lambda rel: (root / rel).is_file(), labels_encoding,
                            bool(in_folder))
        inside = labels.resolve().is_relative_to(root.resolve())
        use_labels(scan, found, str(labels), bool(in_folder),
                   labels.resolve().relative_to(root.resolve()).as_posix() if inside else None)
    return count_samples(scan, folders_layout=labels is None and not unlabelled)


def use_labels(scan: Scan, found, labels_file: str, in_folder: bool,
               inside: str | None) -> None:
    """Label the scan's samples from a labels file read (`found`); `inside` is its path
    in the folder, if it is there (it is not packed)."""
    scan.classes, scan.labels, numbering = label_ids(found.labels)
    scan.label_source, scan.labels_file = "labels-file", labels_file
    scan.labels_read = {"encoding": found.encoding, "header": found.header,
                        "ids": numbering, "found_in_source": in_folder}
    if inside is not None:
        scan.exclude.add(inside)


def count_samples(scan: Scan, folders_layout: bool) -> Scan:
    """The class folders (when `folders_layout` and the top holds only folders), then the
    samples counted and fingerprinted in one walk."""
    folders, files = scan.tree.top_names(scan.exclude)
    notes = [name for name in files if is_note(name)] if folders else []
    scan.exclude.update(notes)
    files = [name for name in files if name not in notes]
    scan.split_folders = split_folders(folders) if not files else None
    if folders_layout:
        scan.top_files = files if folders else []
        classes = _split_classes(scan) if scan.split_folders else folders
        if classes and not files:
            scan.classes, scan.label_source = classes, "folders"
            scan.class_ids = {name: i for i, name in enumerate(scan.classes)}
            scan.class_level = 1 if scan.split_folders else 0
    digest, listing = hashlib.sha256(), []
    for sample in scan.samples(scan.notes):
        listing.append(scan.fingerprinted(sample))
        if len(listing) == 1000:
            _count(scan, listing, digest)
    _count(scan, listing, digest)
    scan.fingerprint = digest.hexdigest()
    scan.notes.ignored += [{"path": p, "reason": NOTE_REASON if p in notes else "the labels file"}
                           for p in sorted(scan.exclude)]
    scan.notes.skipped.sort(key=lambda entry: entry["path"])
    if scan.labels is not None:
        scan.unmatched_labels = sorted(set(scan.labels) - scan.notes.labelled)
    return scan


def split_rank(name: str) -> tuple[int, str]:
    """Where a split folder comes: train, then the validation folders, then test."""
    lowered = name.lower()
    return (SPLIT_FOLDERS.index(lowered) if lowered in SPLIT_FOLDERS else len(SPLIT_FOLDERS),
            name)


def split_folders(folders: list[str]) -> list[str] | None:
    """The top folders, when they are two or more split names (train/, val/, test/ ...)."""
    return folders if len(folders) > 1 and all(f.lower() in SPLIT_FOLDERS
                                               for f in folders) else None


def _split_classes(scan: Scan) -> list[str] | None:
    """The class folders below the split folders (their union, sorted); None where no
    split folder holds one (the samples have no labels). An empty split folder holds
    nothing to label, and files beside class folders are skipped, in no class."""
    notes, classes = Notes(), set()
    top = scan.tree.top()
    for name, entry in scan.tree.entries(top, "", notes):
        if name not in scan.split_folders:
            continue
        handle = scan.tree.kind(top, entry, name, notes)
        found = [(sub, scan.tree.kind(handle, sub_entry, f"{name}/{sub}", notes))
                 for sub, sub_entry in scan.tree.entries(handle, f"{name}/", notes)
                 if not is_junk(sub) and f"{name}/{sub}" not in scan.exclude]
        classes.update(sub for sub, kind in found if kind not in (None, FILE))
    return sorted(classes) or None


def read_labels(path, has_file, encoding: str | None, in_folder: bool, data=None):
    """The labels file at `path` (its bytes `data` when given: `path` only names it);
    `has_file(relative path)` says whether the folder holds a file."""
    try:
        return read_labels_file(path, has_file, encoding, data)
    except PackerError as err:
        if not in_folder:
            raise
        raise PackerError(f"{err} ({PurePosixPath(str(path)).name} at the top of the folder "
                          "is taken for its labels file; pass --labels to name another, or "
                          "--unlabelled to pack it as a file)") from None


def _count(scan: Scan, listing: list, digest) -> None:
    """Add a run of (files, label) to the scan's counts and fingerprint, then empty it."""
    scan.count += len(listing)
    scan.fields.update(field_name for files, *_ in listing for field_name, _ in files)
    digest.update(repr(listing).encode("utf-8", "surrogateescape"))
    listing.clear()
