"""The `files` source: a folder of files, one sample per file (or per stem group).

Layouts, picked in this order:
- `--labels FILE`: a CSV of `filename,label` rows; string labels become class ids.
- ImageFolder: the folder holds only sub-folders; each top folder is a class, ids
  in sorted-name order.
- otherwise (or `--unlabelled`): no labels.

Scanning only lists and stats files; reading and checking happen later, in the
packing workers. The scan is sorted, so the same folder always gives the same
samples in the same order.
"""

import csv
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from packer.errors import PackerError
from packer.keys import disambiguate, encode_key, split_name

SIDECAR_FIELDS = {"json", "txt", "cls"}
JUNK_NAMES = {"thumbs.db", "ehthumbs.db", "desktop.ini", "__macosx", "$recycle.bin"}


@dataclass
class SampleSource:
    """One sample to pack: its key, its files as (field, path relative to root)."""

    key: str
    files: list[tuple[str, str]]
    label: int | None = None
    size: int = 0


@dataclass
class Scan:
    root: Path
    samples: list[SampleSource]
    classes: list[str] | None
    label_source: str  # "folders", "labels-file" or "none"
    labels_file: str | None = None
    skipped: list[dict] = field(default_factory=list)  # inputs not packed, with reasons
    ignored: list[dict] = field(default_factory=list)  # hidden files and OS junk
    symlinks: int = 0  # symlinks met (followed, or skipped under --no-follow-symlinks)
    shared_stems: list[str] = field(default_factory=list)
    unmatched_labels: list[str] = field(default_factory=list)

    @property
    def file_count(self) -> int:
        return sum(len(s.files) for s in self.samples)


@dataclass
class _Walk:
    root: Path
    follow_symlinks: bool
    exclude: set[str]
    files: list[tuple[str, int]] = field(default_factory=list)  # (relative path, size)
    skipped: list[dict] = field(default_factory=list)
    ignored: list[dict] = field(default_factory=list)
    symlinks: int = 0


def scan_folder(
    root: Path,
    *,
    labels: Path | None = None,
    unlabelled: bool = False,
    group_by_stem: bool = False,
    follow_symlinks: bool = True,
) -> Scan:
    root = Path(root)
    if not root.is_dir():
        raise PackerError(f"{root}: not a folder")
    exclude = set()
    if labels is not None and labels.resolve().is_relative_to(root.resolve()):
        exclude.add(labels.resolve().relative_to(root.resolve()).as_posix())
    walk = _Walk(root, follow_symlinks, exclude)
    _walk_dir(walk, root, "", {_dir_id(root)})
    walk.ignored += [{"path": p, "reason": "the labels file"} for p in sorted(exclude)]
    groups = _group(walk.files)
    scan = Scan(root, [], None, "none", skipped=walk.skipped, ignored=walk.ignored,
                symlinks=walk.symlinks)
    samples = _make_samples(groups, group_by_stem, scan)
    if labels is not None:
        _label_from_file(scan, samples, labels)
    elif not unlabelled and _is_image_folder(walk.files):
        _label_from_folders(scan, samples)
    else:
        scan.samples = samples
    scan.skipped.sort(key=lambda entry: entry["path"])
    return scan


def _dir_id(path: Path) -> tuple[int, int]:
    info = path.stat()
    return info.st_dev, info.st_ino


def _is_junk(name: str) -> bool:
    return name.startswith(".") or name.lower() in JUNK_NAMES


def _walk_dir(walk: _Walk, folder: Path, rel: str, ancestors: set) -> None:
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as err:
        walk.skipped.append({"path": rel or ".", "reason": f"cannot list folder: {err.strerror}"})
        return
    for entry in entries:
        rel_path = f"{rel}{entry.name}"
        if _is_junk(entry.name):
            walk.ignored.append({"path": rel_path, "reason": "hidden file or OS junk"})
            continue
        if rel_path in walk.exclude:
            continue
        info = _entry_stat(walk, entry, rel_path)
        if info is None:
            continue
        if stat.S_ISDIR(info.st_mode):
            dir_id = (info.st_dev, info.st_ino)
            if dir_id in ancestors:
                walk.skipped.append({"path": rel_path, "reason": "symlink loop: points to a "
                                     "folder that contains it; not followed"})
                continue
            _walk_dir(walk, Path(entry.path), rel_path + "/", ancestors | {dir_id})
        elif stat.S_ISREG(info.st_mode):
            walk.files.append((rel_path, info.st_size))
        else:
            walk.skipped.append({"path": rel_path, "reason": "not a regular file "
                                 "(a pipe, socket or device)"})


def _entry_stat(walk: _Walk, entry: os.DirEntry, rel_path: str) -> os.stat_result | None:
    """The entry's stat, following a symlink if allowed; None when it is skipped."""
    if not entry.is_symlink():
        return entry.stat(follow_symlinks=False)
    walk.symlinks += 1
    target = os.readlink(entry.path)
    if not walk.follow_symlinks:
        walk.skipped.append({"path": rel_path, "reason": f"symlink to {target}, "
                             "not followed (--no-follow-symlinks)"})
        return None
    try:
        return entry.stat(follow_symlinks=True)
    except OSError:
        walk.skipped.append({"path": rel_path, "reason": f"broken symlink: {target} "
                             "does not exist"})
        return None


def _group(files: list[tuple[str, int]]) -> dict[str, list[tuple[str, str, int]]]:
    """Files by stem path: `a/b` -> [(field, relative path, size), ...], in scan order."""
    groups: dict[str, list[tuple[str, str, int]]] = {}
    for rel_path, size in files:
        folder, slash, name = rel_path.rpartition("/")
        stem, field_name = split_name(name)
        groups.setdefault(folder + slash + stem, []).append((field_name, rel_path, size))
    return groups


def _make_samples(groups: dict, group_by_stem: bool, scan: Scan) -> list[SampleSource]:
    samples = []
    for stem_path, members in groups.items():
        key = encode_key(stem_path)
        main_files = [m for m in members if m[0].lower() not in SIDECAR_FIELDS]
        if group_by_stem or len(main_files) <= 1:
            samples.append(_sample(key, members))
            continue
        scan.shared_stems.append(stem_path)
        samples += [_sample(disambiguate(key, m[0]), [m]) for m in members]
    samples.sort(key=lambda s: s.key)
    return samples


def _sample(key: str, members: list[tuple[str, str, int]]) -> SampleSource:
    return SampleSource(key, [(f, p) for f, p, _ in members], size=sum(m[2] for m in members))


def _is_image_folder(files: list[tuple[str, int]]) -> bool:
    return bool(files) and all("/" in rel_path for rel_path, _ in files)


def _label_from_folders(scan: Scan, samples: list[SampleSource]) -> None:
    scan.label_source = "folders"
    scan.classes = sorted({s.files[0][1].split("/", 1)[0] for s in samples})
    class_ids = {name: i for i, name in enumerate(scan.classes)}
    for sample in samples:
        sample.label = class_ids[sample.files[0][1].split("/", 1)[0]]
    scan.samples = _drop_cls_sidecars(scan, samples, "the class folder")


def _drop_cls_sidecars(scan: Scan, samples: list[SampleSource], origin: str):
    """A `.cls` file would clash with the label the layout gives; list it as skipped."""
    kept = []
    for sample in samples:
        clashing = [p for f, p in sample.files if f.lower() == "cls"]
        scan.skipped += [{"path": p, "reason": f"a .cls file, but the label comes from "
                          f"{origin}"} for p in clashing]
        sample.files = [(f, p) for f, p in sample.files if f.lower() != "cls"]
        if sample.files:
            kept.append(sample)
    return kept


def read_labels_file(path: Path) -> dict[str, str]:
    """`filename,label` rows (a header row is recognised and skipped)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as err:
        raise PackerError(f"{path}: cannot read the labels file: {err}") from None
    rows = [row for row in csv.reader(text.splitlines()) if row and any(row)]
    if rows and rows[0][0].strip().lower() in {"filename", "file", "path", "name", "image"}:
        rows = rows[1:]
    labels = {}
    for line, row in enumerate(rows, start=1):
        if len(row) < 2 or not row[1].strip():
            raise PackerError(f"{path}, row {line}: expected 'filename,label', got {row!r}")
        labels[row[0].strip().replace("\\", "/")] = row[1].strip()
    if not labels:
        raise PackerError(f"{path}: the labels file has no rows")
    return labels


def _label_from_file(scan: Scan, samples: list[SampleSource], labels_path: Path) -> None:
    labels = read_labels_file(labels_path)
    scan.label_source, scan.labels_file = "labels-file", str(labels_path)
    if all(value.isdigit() for value in labels.values()):
        scan.classes = [str(i) for i in range(max(int(v) for v in labels.values()) + 1)]
    else:
        scan.classes = sorted(set(labels.values()))
    class_ids = {name: i for i, name in enumerate(scan.classes)}
    used, kept = set(), []
    for sample in samples:
        names = [p for _, p in sample.files if p in labels]
        if not names:
            scan.skipped += [{"path": p, "reason": f"no label in {labels_path.name}"}
                             for _, p in sample.files]
            continue
        used.update(names)
        sample.label = class_ids[str(int(labels[names[0]])) if labels[names[0]].isdigit()
                                 else labels[names[0]]]
        kept.append(sample)
    scan.unmatched_labels = sorted(set(labels) - used)
    scan.samples = _drop_cls_sidecars(scan, kept, labels_path.name)


def read_sample(root: Path, source: SampleSource, check: str) -> tuple[dict | None, list]:
    """The sample's bytes as a dict, or None and the skip entries of its files."""
    from packer.checks import check_file

    sample: dict = {"__key__": source.key}
    for field_name, rel_path in source.files:
        try:
            with open(root / rel_path, "rb") as file:
                data = file.read()
        except OSError as err:
            reason = f"cannot read: {err.strerror}"
        else:
            reason = check_file(field_name, data, check)
        if reason:
            others = [{"path": p, "reason": f"belongs to the sample of {rel_path}, which "
                       "was skipped"} for _, p in source.files if p != rel_path]
            return None, [{"path": rel_path, "reason": reason}, *others]
        sample[field_name] = data
    if source.label is not None:
        sample["cls"] = source.label
    return sample, []


def read_chunk(job: tuple[str, str, list[SampleSource]]) -> list[tuple[dict | None, list]]:
    """`read_sample` over a chunk; the unit of work of a packing worker."""
    root, check, sources = job
    return [read_sample(Path(root), source, check) for source in sources]
