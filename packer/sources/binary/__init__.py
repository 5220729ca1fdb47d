"""The `binary` source kind: raw dumps (a header, then fixed-size records) described by
a TOML spec file (`--spec`), as records or windows of records, or a folder of small
binary files.

    from packer.sources.binary import load_spec, open_dump, record_arrays, Windows
    spec = load_spec("imu.toml")              # or a shipped spec by name: "imu"
    dump = open_dump("imu.bin", spec)         # checks magic, size and count; DumpError if not
    for records in dump.chunks():             # native-order structured arrays, bounded memory
        arrays = record_arrays(records, spec) # {"timestamp_ns": (n,), "accel": (n, 3), ...}

    spec.py, fields.py   a spec file compiled to a numpy structured dtype
    dump.py, counts.py   a dump opened and checked: magic, size, record count
    chunks.py            chunked containers (RIFF WAV, AIFF) walked to their records
    records.py           how records and windows of records become samples
    source.py            the source: a dump or a folder of binary files, packed
    options.py           BinaryOptions: records, windows, labels; their click options
    compare.py           `packer verify --against`: a dump or a folder, read again
    report.py, hexview.py, overlay.py    what `packer inspect-binary` shows
    specs/               worked specs, loadable by name

This `__init__` stays light (the source registry imports it to ask which kind a path
is): the names above are imported when first used.
"""

import importlib
from pathlib import Path

from packer.sources.base import Applies, Kind
from packer.sources.binary.shipped import shipped_spec_names  # noqa: F401 (the API's)

_API = {"Check": "dump", "Dump": "dump", "DumpError": "dump", "examine_dump": "dump",
        "open_dump": "dump", "Windows": "records", "record_arrays": "records",
        "window_arrays": "records", "Spec": "spec", "SpecError": "spec", "load_spec": "spec",
        "parse_spec": "spec"}
__all__ = sorted([*_API, "shipped_spec_names"])


def __getattr__(name: str):
    if name in _API:
        return getattr(importlib.import_module(f"{__name__}.{_API[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

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
OPTIONS_MODULE = "packer.sources.binary.options"
AGAINST_FILES = True  # --against takes the dump (a file) or the folder it was packed from


def against(manifest: dict, path: Path):
    from packer.sources.binary.compare import Folder, dump_against

    if manifest["source"]["kind"] == "binary-files":
        return Folder(manifest, path)
    return dump_against(manifest, path)


def claims(path: Path, spec: str | None) -> str | None:
    if not spec:
        return None
    return BINARY_FOLDER if path.is_dir() else DUMP


def claims_url(url: str, spec: str | None, one_object: bool) -> str | None:
    return DUMP if spec and one_object else None  # a prefix of binary files: copied first


def summary_text(manifest: dict) -> str | None:
    """Sounds of several sample rates, which a model would take as one."""
    rates = manifest["source"].get("sample_rates") or {}
    if len(rates) < 2:
        return None
    shown = ", ".join(f"{rate} Hz ({count:,} file{'s' if count > 1 else ''})"
                      for rate, count in sorted(rates.items(), key=lambda r: -r[1]))
    return (f"Warning: the sounds have {len(rates)} sample rates: {shown}. A model takes "
            "their samples as if they were one rate: resample them to one first, or pack "
            "each rate apart (each sample's audio.json holds its own rate)")


def scan_input(path: Path, options):
    """The dump (or folder of binary files), and the function its jobs are read with."""
    from packer.sources.binary.source import BinaryDump, BinaryFolder, read_folder_job, read_job

    if path.is_dir():
        return BinaryFolder(path, options.spec, options.source), read_folder_job
    return BinaryDump(path, options.spec, options.source), read_job
