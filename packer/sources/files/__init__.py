"""The `files` source kind: a folder of files, one sample per file (or per stem group).

    scan.py     walk the folder into samples (layout, labels, sidecars, symlinks)
    objects.py  an s3:// prefix listed into the tree that scan.py walks
    read.py     read and check one sample in a worker (from disk, or from S3)
    labels.py   filename,label CSV files
    checks.py   cheap signature and end-marker checks, optional full decode
    compare.py  `packer verify --against`: packed samples against the source folder
    options.py  FolderOptions: how a folder is scanned, and their click options
"""

from pathlib import Path

from packer.sources.base import Applies, Kind

NAME = "files"
FOLDER = "folder"
KINDS = {FOLDER: Kind("a folder of files", "folders of files without --spec",
                      "folders with or without --spec")}
_FOLDER = frozenset({FOLDER})
OPTIONS = {name: Applies(_FOLDER) for name in ("labels", "unlabelled", "group_by_stem",
                                               "follow_symlinks", "check", "on_error")}
OPTIONS["encoding"] = Applies(_FOLDER, needs={FOLDER: "labels"})  # of the labels file
OPTIONS.update(resize=Applies(_FOLDER), encode=Applies(_FOLDER),  # the pack-time transform
               resize_mode=Applies(_FOLDER, needs={FOLDER: "resize"}),
               split_by=Applies(_FOLDER, needs={FOLDER: "split"}))  # groups from the paths
UNCLAIMED = "not a folder"
RECORDED_AS = ("files",)
OPTIONS_MODULE = "packer.sources.files.options"


def claims(path: Path, spec: str | None) -> str | None:
    return FOLDER if not spec and path.is_dir() else None


def summary_text(manifest: dict) -> None:
    return None  # the summary of every pack says all there is


def claims_url(url: str, spec: str | None, one_object: bool) -> str | None:
    """An s3:// prefix is a folder of files (listed when it is scanned)."""
    return FOLDER if not spec and not one_object else None


def scan_input(path, options):
    """The scanned folder (a local path, or an s3:// prefix), and the function its jobs
    are read with; `options.source` is a FolderOptions."""
    from packer.storage.url import is_s3

    if is_s3(path):
        from packer.sources.files.objects import scan_prefix
        from packer.sources.files.read import read_object_job

        return scan_prefix(path, options.source), read_object_job
    from packer.sources.files.read import read_job

    return options.source.scan(path), read_job


def against(manifest: dict, folder: Path):
    from packer.sources.files.compare import Against

    return Against(manifest, folder)
