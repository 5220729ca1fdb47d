"""The `files` source: a folder of files, one sample per file (or per stem group).

Layouts, picked in this order:
- `--labels FILE`, or a `labels.csv` at the top of the folder: a CSV of
  `filename,label` rows; string labels become class ids.
- ImageFolder: the folder holds only sub-folders; each top folder is a class, ids
  in sorted-name order.
- otherwise (or `--unlabelled`): no labels.

The folder is walked twice, folder by folder in sorted order: `scan_folder` counts
samples and notes what is skipped, `Scan.samples()` yields the samples for packing.
Only one folder's listing is held at a time, so memory does not grow with the
file count. Regular files are known from the listing and not stat'ed; reading and
checking the bytes happen later, in the packing workers, which also count them.
"""

import hashlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

from packer.errors import PackerError
from packer.sample import disambiguate, encode_key, split_name
from packer.sources.base import Source
from packer.sources.files.checks import check_head, check_input
from packer.sources.files.labels import label_ids, labels_in_folder, read_labels_file

SIDECAR_FIELDS = {"json", "txt", "cls"}
JUNK_NAMES = {"thumbs.db", "ehthumbs.db", "desktop.ini", "__macosx", "$recycle.bin"}


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

    def describe(self, options) -> dict:
        """What the manifest says of this source, beside the common entries."""
        return {
            "source": {"kind": "files", "path": str(self.root.resolve()),
                       "labels": self.label_source, "labels_file": self.labels_file,
                       "labels_read": self.labels_read, "samples": self.count,
                       "bytes": self.input_bytes,
                       "top_files": self.top_files[:5], "top_file_count": len(self.top_files)},
            "ignored": self.notes.ignored,
            "symlinks": {"followed": self.follow_symlinks, "count": self.notes.symlinks},
            "shared_stems": self.notes.shared_stems,
            "unmatched_labels": self.unmatched_labels,
        }

    def samples(self, notes: Notes | None = None) -> Iterator[SampleFiles]:
        """Every sample in order; what is skipped on the way goes to `notes`."""
        notes = notes if notes is not None else Notes()
        walk = _walk(self, Path(self.root), "", {_dir_id(self.root)}, notes)
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
        if self.labels is None:  # ImageFolder: the folder's top component is the class
            label = self.class_ids[folder.split("/", 1)[0]]
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


def _dir_id(path: Path) -> tuple[int, int]:
    info = Path(path).stat()
    return info.st_dev, info.st_ino


def _is_junk(name: str) -> bool:
    return name.startswith(".") or name.lower() in JUNK_NAMES


def _walk(scan: Scan, folder: Path, rel: str, ancestors: set, notes: Notes) -> Iterator:
    """(relative folder with trailing slash, [file name, ...]) for each folder."""
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as err:
        notes.skipped.append({"path": rel or ".", "reason": f"cannot list folder: {err.strerror}"})
        return
    files, subfolders = [], []
    for entry in entries:
        rel_path = f"{rel}{entry.name}"
        if _is_junk(entry.name):
            notes.ignored.append({"path": rel_path, "reason": "hidden file or OS junk"})
            continue
        if rel_path in scan.exclude:
            continue
        if entry.is_file(follow_symlinks=False):  # known from the listing
            files.append(entry.name)
            continue
        info = _entry_stat(scan.follow_symlinks, entry, rel_path, notes)
        if info is None:
            continue
        if stat.S_ISDIR(info.st_mode):
            dir_id = (info.st_dev, info.st_ino)
            if dir_id in ancestors:
                notes.skipped.append({"path": rel_path, "reason": "symlink loop: points to a "
                                      "folder that contains it; not followed"})
                continue
            subfolders.append((entry, dir_id))
        elif stat.S_ISREG(info.st_mode):
            files.append(entry.name)
        else:
            notes.skipped.append({"path": rel_path, "reason": "not a regular file "
                                  "(a pipe, socket or device)"})
            continue
        if entry.is_symlink():  # followed: an unfollowed one returned no stat
            notes.symlinks += 1
    del entries  # a big folder's entries hold stat results; free them before going on
    if files:
        yield rel, files
    for entry, dir_id in subfolders:
        yield from _walk(scan, Path(entry.path), f"{rel}{entry.name}/", ancestors | {dir_id},
                         notes)


def _entry_stat(follow: bool, entry: os.DirEntry, rel_path: str, notes: Notes):
    """The entry's stat, following a symlink if allowed; None when it is skipped."""
    if not entry.is_symlink():
        return entry.stat(follow_symlinks=False)
    target = os.readlink(entry.path)
    if not follow:
        notes.symlinks += 1
        notes.skipped.append({"path": rel_path, "reason": f"symlink to {target}, "
                              "not followed (--no-follow-symlinks)"})
        return None
    try:
        return entry.stat(follow_symlinks=True)
    except OSError:
        notes.skipped.append({"path": rel_path, "reason": f"broken symlink: {target} "
                              "does not exist"})
        return None


def _top_entries(root: Path, exclude: set[str]) -> tuple[list[str], list[str]]:
    """The top-level (folders, files): class folders when there are no files."""
    names = sorted(e.name for e in os.scandir(root)
                   if not _is_junk(e.name) and e.name not in exclude)
    files = [name for name in names if os.path.isfile(root / name)]
    return [name for name in names if os.path.isdir(root / name)], files


def scan_folder(root: Path, *, labels: Path | None = None, unlabelled: bool = False,
                group_by_stem: bool = False, follow_symlinks: bool = True,
                labels_encoding: str | None = None) -> Scan:
    """Decide the layout, then count the samples in one pass over the folder."""
    root = Path(root)
    if not root.is_dir():
        raise PackerError(f"{root}: not a folder")
    scan = Scan(root, group_by_stem, follow_symlinks)
    in_folder = labels is None and not unlabelled and labels_in_folder(root)
    if in_folder:
        labels = in_folder
    if labels is not None:
        found = _read_labels(labels, root, labels_encoding, bool(in_folder))
        scan.classes, scan.labels, numbering = label_ids(found.labels)
        scan.label_source, scan.labels_file = "labels-file", str(labels)
        scan.labels_read = {"encoding": found.encoding, "header": found.header,
                            "ids": numbering, "found_in_source": bool(in_folder)}
        if labels.resolve().is_relative_to(root.resolve()):
            scan.exclude.add(labels.resolve().relative_to(root.resolve()).as_posix())
    elif not unlabelled:
        folders, files = _top_entries(root, scan.exclude)
        scan.top_files = files if folders else []
        if folders and not files:
            scan.classes, scan.label_source = folders, "folders"
            scan.class_ids = {name: i for i, name in enumerate(scan.classes)}
    digest, listing = hashlib.sha256(), []
    for sample in scan.samples(scan.notes):
        listing.append((sample.files, sample.label))
        if len(listing) == 1000:
            _count(scan, listing, digest)
    _count(scan, listing, digest)
    scan.fingerprint = digest.hexdigest()
    scan.notes.ignored += [{"path": p, "reason": "the labels file"} for p in sorted(scan.exclude)]
    scan.notes.skipped.sort(key=lambda entry: entry["path"])
    if scan.labels is not None:
        scan.unmatched_labels = sorted(set(scan.labels) - scan.notes.labelled)
    return scan


def _read_labels(path: Path, root: Path, encoding: str | None, in_folder: bool):
    try:
        return read_labels_file(path, root, encoding)
    except PackerError as err:
        if not in_folder:
            raise
        raise PackerError(f"{err} ({path.name} at the top of the folder is taken for its "
                          "labels file; pass --labels to name another, or --unlabelled to "
                          "pack it as a file)") from None


def _count(scan: Scan, listing: list, digest) -> None:
    """Add a run of (files, label) to the scan's counts and fingerprint, then empty it."""
    scan.count += len(listing)
    scan.fields.update(field_name for files, _ in listing for field_name, _ in files)
    digest.update(repr(listing).encode("utf-8", "surrogateescape"))
    listing.clear()


HEAD_BYTES = 1 << 20  # a file larger than this is read whole only once its start passes


def read_input(path: str, field: str, check: str) -> tuple[bytes, str | None, list[str]]:
    """An input file's bytes, the reason to skip it (None for a good file) and the
    warnings its check gave. A big file whose first bytes already say it is not what
    its name says is not read."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size > HEAD_BYTES and (reason := check_head(field, os.pread(fd, 64, 0), check)):
            return b"", reason, []
        data = _read_all(fd, size)
    finally:
        os.close(fd)
    return data, *check_input(field, data, check)


def read_file(path: str) -> bytes:
    """A whole file, in as few system calls as a small file allows."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return _read_all(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def _read_all(fd: int, size: int) -> bytes:
    chunks = [os.read(fd, size + 1)]
    if len(chunks[0]) != size:  # grown since the stat, or a short read of a big file
        while chunk := os.read(fd, 1 << 24):
            chunks.append(chunk)
    return b"".join(chunks) if len(chunks) > 1 else chunks[0]


def read_sample(root: str, source: tuple, check: str) -> tuple[dict | None, list]:
    """The sample (key, files, label) read into a dict and the warnings of its files
    ({"path", "warnings"} entries), or None and the skip entries of its files."""
    key, files, label = source
    sample: dict = {"__key__": key}
    warned = []
    for field_name, rel_path in files:
        try:
            data, reason, warnings = read_input(f"{root}/{rel_path}", field_name, check)
        except OSError as err:
            reason, warnings = f"cannot read: {err.strerror}", []
        if reason:
            others = [{"path": p, "reason": f"belongs to the sample of {rel_path}, which "
                       "was skipped"} for _, p in files if p != rel_path]
            return None, [{"path": rel_path, "reason": reason}, *others]
        if warnings:
            warned.append({"path": rel_path, "warnings": warnings})
        sample[field_name] = data
    if label is not None:
        sample["cls"] = label
    return sample, warned


def read_job(job: tuple[str, str, list[SampleFiles]]) -> list[tuple[dict | None, list]]:
    """Read and check one unit of worker work made by `Scan.jobs`."""
    root, check, sources = job
    return [read_sample(root, source, check) for source in sources]
