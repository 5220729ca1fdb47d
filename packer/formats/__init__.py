"""The format registry: name -> module with `WRITER` and `read_part(folder, manifest, part)`.

Modules are imported on first use, so packing tar shards never imports h5py or lmdb.
"""

import importlib
from types import ModuleType

_MODULES = {
    "webdataset": "packer.formats.webdataset",
    "lmdb": "packer.formats.lmdb",
    "hdf5": "packer.formats.hdf5",
    "tfrecord": "packer.formats.tfrecord",
}
FORMAT_NAMES = tuple(_MODULES)


def format_module(name: str) -> ModuleType:
    return importlib.import_module(_MODULES[name])
