"""The options of the files kind: how a folder is scanned into samples (its labels, its
layout, its links), and their click options. The binary kind scans a folder of binary
files with them too (packer/sources/binary/options.py)."""

from dataclasses import dataclass
from pathlib import Path

import click

from packer.sources.options import KindOptions, option_group


@dataclass
class FolderOptions(KindOptions):
    labels: Path | None = None
    unlabelled: bool = False
    group_by_stem: bool = False
    follow_symlinks: bool = True
    encoding: str | None = None  # of the labels file (its flag is the tables kind's)

    def scan(self, root: Path):
        """The folder `root` scanned with these options."""
        from packer.sources.files.scan import scan_folder

        return scan_folder(root, labels=self.labels, unlabelled=self.unlabelled,
                           group_by_stem=self.group_by_stem,
                           follow_symlinks=self.follow_symlinks, labels_encoding=self.encoding)


CLICK = {
    "labels": dict(
        type=click.Path(path_type=Path, dir_okay=False),
        help="CSV of filename,label rows for a flat folder, paths relative to SOURCE; "
             "string labels become ids. Looked for in the current folder, then in "
             "SOURCE; a labels.csv at the top of SOURCE is used without --labels "
             "(--unlabelled packs it as a file). The first row is a header when its "
             "first cell is filename, file, path, name or image, or when it names no "
             "file while a later row does (and its label is no other row's). The "
             "encoding and the delimiter (, ; tab |) are detected. For a binary dump: "
             "one label per record."),
    "unlabelled": dict(
        is_flag=True,
        help="Do not take classes from sub-folder names or from a labels.csv in "
             "SOURCE; keys keep the paths."),
    "group_by_stem": dict(
        is_flag=True,
        help="Make every set of files sharing a stem one sample (image + mask pairs)."),
    "follow_symlinks": dict(
        flags=("--follow-symlinks/--no-follow-symlinks",), show_default=True,
        help="Follow symlinked files and folders (loops are detected and skipped)."),
}
Options = FolderOptions  # the registry's names for them (packer/sources/base.py)
click_options = option_group(FolderOptions, CLICK)
