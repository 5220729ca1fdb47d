"""packer: pack the data people really have into WebDataset, LMDB or HDF5.

The Python API mirrors the CLI:

    import packer
    manifest = packer.pack("images", "images-wds", packer.PackOptions(to="webdataset"))
    report = packer.verify("images-wds", against="images")
    for sample in packer.iter_samples("images-wds"): ...
    ds = packer.open_dataset("images-wds", shuffle=True, image_size=64)   # PyTorch

Packing never imports torch: the loader's names are imported when first used.
"""

__version__ = "0.1.0"

from packer.dataset import iter_samples  # noqa: E402
from packer.manifest import load_manifest  # noqa: E402
from packer.packing import PackOptions, pack  # noqa: E402
from packer.unpack import unpack  # noqa: E402
from packer.verify import verify  # noqa: E402

_LOADER_NAMES = {"DataLoader", "PackedDataset", "open_dataset"}


def __getattr__(name: str):
    if name in _LOADER_NAMES:
        from packer import loader

        return getattr(loader, name)
    raise AttributeError(f"module 'packer' has no attribute {name!r}")


__all__ = ["DataLoader", "PackOptions", "PackedDataset", "iter_samples", "load_manifest",
           "open_dataset", "pack", "unpack", "verify"]
