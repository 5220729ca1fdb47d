"""packer: pack the data people really have into WebDataset, LMDB, HDF5 or TFRecord.

The Python API mirrors the CLI:

    import packer
    manifest = packer.pack("images", "images-wds", packer.PackOptions(to="webdataset"))
    packer.pack("export.csv", "export.h5", packer.PackOptions(
        to="hdf5", source=packer.TableOptions(label_column=("diagnosis",))))
    report = packer.verify("images-wds", against="images")
    for sample in packer.iter_samples("images-wds"): ...
    ds = packer.open_dataset("images-wds", shuffle=True, image_size=64)   # PyTorch

Packing never imports torch: every name is imported when first used. In a program
that has imported torch already, `import packer` imports the reading side too, so
that its first epoch does not.
"""

import sys as _sys

from packer.version import __version__  # noqa: F401  (packer.__version__)

# Names are imported when first used, so that `packer pack` starts without numpy,
# torch or h5py unless the job needs them. No module of packer/ itself is named like
# one of these (`packer.pack` is a function: the pack side is packer/packing/).
_LAZY_NAMES = {
    "iter_samples": "packer.read.dataset", "load_manifest": "packer.read.dataset",
    "MANIFEST_NAME": "packer.manifest", "PackOptions": "packer.packing.options",
    "pack": "packer.packing", "unpack": "packer.datasets.unpack",
    "verify": "packer.datasets.verify",
    "DataLoader": "packer.read.dataloader", "PackedDataset": "packer.read.loader",
    "open_dataset": "packer.read.loader", "collate_samples": "packer.read.loader",
    "IMAGE_FIELDS": "packer.read.decode", "LooseImages": "packer.read.loose",
    "RAW_IMAGE_FIELD": "packer.sample", "size_bytes": "packer.text",
    "loose_images": "packer.read.loose", "scan_folder": "packer.sources.files.scan",
    "dataset_info": "packer.datasets.info",
    "FolderOptions": "packer.sources.files.options",
    "TableOptions": "packer.sources.tables.options",
    "BinaryOptions": "packer.sources.binary.options",
}


def __getattr__(name: str):
    if name in _LAZY_NAMES:
        import importlib

        value = getattr(importlib.import_module(_LAZY_NAMES[name]), name)
        globals()[name] = value  # looked up once
        return value
    raise AttributeError(f"module 'packer' has no attribute {name!r}")


__all__ = sorted(_LAZY_NAMES)

# A program that has imported torch reads with it: the reading side is imported now,
# with packer, rather than in its first epoch.
if "torch" in _sys.modules:
    from packer.read import dataloader as _dataloader  # noqa: F401  (and packer.read.loader)
