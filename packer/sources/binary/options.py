"""The options of the binary kind: how a dump's records become samples, and the labels
of its records; a folder of binary files is scanned with the files kind's options."""

from dataclasses import dataclass

import click

from packer.sources.files.options import FolderOptions
from packer.sources.options import option_group


@dataclass
class BinaryOptions(FolderOptions):
    window: int | None = None
    stride: int | None = None
    tail: str | None = None
    label_field: str | None = None
    label_spec: str | None = None


CLICK = {
    "window": dict(
        type=click.IntRange(min=1),
        help="Binary dump: one sample per window of this many records (default: one "
             "sample per record)."),
    "stride": dict(
        type=click.IntRange(min=1),
        help="Binary dump: records between window starts (default: the window)."),
    "tail": dict(
        type=click.Choice(["error", "drop"]),
        help="Binary: bytes after the last whole record: refuse them, or leave them out."),
    "label_field": dict(
        metavar="FIELD", help="Binary dump: the record field whose values are the classes."),
    "label_spec": dict(
        metavar="SPEC",
        help="Binary dump: --labels is a binary file read with this spec (e.g. "
             "mnist-idx-labels); without it, --labels has one label per line."),
}
Options = BinaryOptions  # the registry's names for them (packer/sources/base.py)
click_options = option_group(BinaryOptions, CLICK)
