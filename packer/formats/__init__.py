"""The format registry: name -> the module that implements packer.formats.protocol.Format.

A new format is one module here and one line below. Modules are imported on first
use, so packing tar shards never imports h5py or lmdb.
"""

import importlib
from types import ModuleType

from packer.errors import UsageProblem

_MODULES = {
    "webdataset": "packer.formats.webdataset",
    "lmdb": "packer.formats.lmdb",
    "hdf5": "packer.formats.hdf5",
    "tfrecord": "packer.formats.tfrecord",
}
FORMAT_NAMES = tuple(_MODULES)
DEFAULT_FORMAT = FORMAT_NAMES[0]


def registered() -> tuple[str, ...]:
    """The names of the formats registered now."""
    return tuple(_MODULES)
def manifest_of_file(path) -> dict | None:
    """The manifest of a dataset stored as the one file `path`, by the format that
    wrote it; None when no format stores its datasets as such a file."""
    for name in _MODULES:
        manifest = format_module(name).manifest_in_file(path)
        if manifest is not None:
            return manifest
    return None


def format_module(name: str) -> ModuleType:
    """The module of the format `name`."""
    if name not in _MODULES:
        raise UsageProblem(f"--to {name}: no such format; the formats are "
                           f"{', '.join(_MODULES)}")
    return importlib.import_module(_MODULES[name])
