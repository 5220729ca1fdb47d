"""packer: pack the data people really have into WebDataset, LMDB or HDF5."""

__version__ = "0.1.0"
