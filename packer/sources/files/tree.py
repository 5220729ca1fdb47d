"""A folder on disk as the walk of packer.sources.files.scan lists it (`LocalTree`): its
entries sorted by name, regular files known from the listing (no stat), symlinks
followed or not, a folder that contains itself skipped; and what every tree shares
(packer.sources.files.objects is the tree of an s3:// prefix): the junk rule, the kind
of a file."""

import os
import stat
from pathlib import Path

JUNK_NAMES = {"thumbs.db", "ehthumbs.db", "desktop.ini", "__macosx", "$recycle.bin"}


def _dir_id(path: Path) -> tuple[int, int]:
    info = Path(path).stat()
    return info.st_dev, info.st_ino


def is_junk(name: str) -> bool:
    return name.startswith(".") or name.lower() in JUNK_NAMES


NOTE_STEMS = ("readme", "license", "licence", "citation", "notice", "changelog", "authors")
NOTE_SUFFIXES = (".md", ".rst", ".pdf", ".html", ".htm")
NOTE_REASON = "a note at the top, beside the folders (README, LICENSE, a .md page): not a sample"


def is_note(name: str) -> bool:
    """A file that documents a dataset (README, LICENSE ... or a .md or .pdf page): at
    the top beside class or split folders it is no sample, and the layout holds."""
    lowered = name.lower()
    return lowered.split(".")[0] in NOTE_STEMS or lowered.endswith(NOTE_SUFFIXES)


FILE = "file"  # what a tree's `kind` says of an entry that is a file


class LocalTree:
    """A folder on disk as the walk lists it: regular files known from the listing (no
    stat), symlinks followed or not, and a folder that contains itself skipped.

    A tree (this one, or packer.sources.files.objects.ObjectTree) offers the walk
    `top()`, the handle of its top folder; `entries(handle, rel, notes)`, a folder's
    (name, entry) pairs sorted by name; `kind(handle, entry, rel_path, notes)`: FILE, the
    handle of a sub-folder, or None for an entry it skipped (noted); and
    `top_names(exclude)`, the (folders, files) at the top."""

    def __init__(self, root: Path, follow_symlinks: bool):
        self.root, self.follow = Path(root), follow_symlinks

    def top(self) -> tuple[Path, frozenset]:
        return self.root, frozenset({_dir_id(self.root)})

    def entries(self, handle, rel: str, notes) -> list:
        try:
            return sorted(((e.name, e) for e in os.scandir(handle[0])), key=lambda e: e[0])
        except OSError as err:
            notes.skipped.append({"path": rel or ".",
                                  "reason": f"cannot list folder: {err.strerror}"})
            return []

    def kind(self, handle, entry: os.DirEntry, rel_path: str, notes):
        if entry.is_file(follow_symlinks=False):  # known from the listing
            return FILE
        info = _entry_stat(self.follow, entry, rel_path, notes)
        if info is None:
            return None
        if stat.S_ISDIR(info.st_mode):
            dir_id = (info.st_dev, info.st_ino)
            if dir_id in handle[1]:
                notes.skipped.append({"path": rel_path, "reason": "symlink loop: points to a "
                                      "folder that contains it; not followed"})
                return None
            found = (Path(entry.path), handle[1] | {dir_id})
        elif stat.S_ISREG(info.st_mode):
            found = FILE
        else:
            notes.skipped.append({"path": rel_path, "reason": "not a regular file "
                                  "(a pipe, socket or device)"})
            return None
        if entry.is_symlink():  # followed: an unfollowed one returned no stat
            notes.symlinks += 1
        return found

    def top_names(self, exclude: set[str]) -> tuple[list[str], list[str]]:
        names = sorted(e.name for e in os.scandir(self.root)
                       if not is_junk(e.name) and e.name not in exclude)
        files = [name for name in names if os.path.isfile(self.root / name)]
        return [name for name in names if os.path.isdir(self.root / name)], files


def _entry_stat(follow: bool, entry: os.DirEntry, rel_path: str, notes):
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
