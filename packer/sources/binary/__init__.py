"""The `binary` source kind: raw dumps described by a spec file (`--spec`), as records
or windows of records, or a folder of small binary files (`source.py`; packer/binary/
reads the specs and dumps)."""

from pathlib import Path

from packer.sources.base import Applies, Kind

NAME = "binary"
DUMP, BINARY_FOLDER = "binary-dump", "binary-folder"
KINDS = {
    DUMP: Kind("a binary dump (a file with --spec)", "binary dumps with --spec"),
    BINARY_FOLDER: Kind("a folder of binary files (a folder with --spec)",
                        "folders of binary files with --spec", "folders with or without --spec"),
}
_DUMP, _FOLDER = frozenset({DUMP}), frozenset({BINARY_FOLDER})
OPTIONS = {
    "labels": Applies(_DUMP | _FOLDER),
    "unlabelled": Applies(_FOLDER),
    "follow_symlinks": Applies(_FOLDER),
    "on_error": Applies(_FOLDER),  # only files are ever skipped
    "window": Applies(_DUMP),
    "stride": Applies(_DUMP, needs={DUMP: "window"}),
    "tail": Applies(_DUMP | _FOLDER),
    "label_field": Applies(_DUMP),
    "label_spec": Applies(_DUMP, needs={DUMP: "labels"}),
    "encoding": Applies(_FOLDER, needs={BINARY_FOLDER: "labels"}),  # of the labels file
}
UNCLAIMED = "a binary dump is packed with --spec"
RECORDED_AS = ("binary", "binary-files")
AGAINST_FILES = True  # --against takes the dump (a file) or the folder it was packed from


def against(manifest: dict, path: Path):
    from packer.sources.compare import Folder, dump_against

    if manifest["source"]["kind"] == "binary-files":
        return Folder(manifest, path)
    return dump_against(manifest, path)


def claims(path: Path, spec: str | None) -> str | None:
    if not spec:
        return None
    return BINARY_FOLDER if path.is_dir() else DUMP


def claims_url(url: str, spec: str | None, one_object: bool) -> str | None:
    return DUMP if spec and one_object else None  # a prefix of binary files: copied first


def summary_text(manifest: dict) -> None:
    return None  # the summary of every pack says all there is


def scan_input(path: Path, options):
    """The dump (or folder of binary files), and the function its jobs are read with."""
    from packer.sources.binary.source import BinaryDump, BinaryFolder, read_folder_job, read_job

    if path.is_dir():
        return BinaryFolder(path, options), read_folder_job
    return BinaryDump(path, options), read_job
