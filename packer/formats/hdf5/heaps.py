"""The heaps that hold an HDF5 file's variable-length rows (image bytes, keys), checked
before HDF5 reads them: libhdf5 walks a heap's objects by their recorded sizes, and an
object whose size was zeroed by damage sends that walk round forever (the process hangs
in C, beyond any Python timeout). Heaps are found from the rows' own references, read
raw from the datasets' chunks, so nothing is taken from a signature that image bytes
could also hold."""

import os
from pathlib import Path

import h5py
import numpy as np

from packer.errors import DatasetError
from packer.formats.hdf5.generations import INDEX_ATTR

# A variable-length row as stored: its length, then its heap's address and object index
_ROW = np.dtype([("length", "<u4"), ("heap", "<u8"), ("index", "<u4")])
_HEADER = 16  # "GCOL", version, 3 reserved bytes, the heap's size (8 bytes)
_OBJECT = 16  # index (2), references (2), reserved (4), size (8)


class DamagedHeader(DatasetError):
    """A dataset's object header could not be read, so its heaps were not found."""


def check_heaps(path: Path, names: tuple[str, ...] | None = None) -> None:
    """A DatasetError naming the first damaged heap of the file, if any; with `names`,
    of the heaps that those datasets' rows point into (the only ones a read of them
    walks)."""
    try:
        file = h5py.File(path, "r")
    except OSError as err:
        raise DatasetError(f"{path}: cannot open the HDF5 file ({err}); restore it from a "
                           "copy or pack the source again") from None
    with file:
        addresses = set()
        try:
            datasets = [dataset for dataset in _vlen_datasets(file)
                        if names is None or dataset.name.lstrip("/") in names]
        except (KeyError, RuntimeError, OSError) as err:  # what h5py raises for it
            raise DamagedHeader(f"{path}: an HDF5 object header is damaged ({err}); restore "
                                "the file from a copy or pack the source again") from None
        for dataset in datasets:
            addresses.update(_heap_addresses(path, dataset))
    size = os.path.getsize(path)
    with open(path, "rb") as raw:
        for address in sorted(addresses):
            problem = _heap_problem(raw.fileno(), address, size)
            if problem:
                raise DatasetError(f"{path}: the heap of variable-length rows at byte offset "
                                   f"{address:,} is damaged ({problem}); restore the file "
                                   "from a copy or pack the source again")


def _vlen_datasets(file: h5py.File) -> list[h5py.Dataset]:
    """The chunked datasets of variable-length rows (bytes or strings); none in an
    appended dataset's index, whose datasets are virtual (their rows lie in the
    generation files) and are not even opened: a damaged mapping crashes libhdf5."""
    found = []
    if INDEX_ATTR in file.attrs:
        return found

    def visit(_, item) -> None:
        if (isinstance(item, h5py.Dataset) and item.chunks
                and h5py.check_vlen_dtype(item.dtype) is not None):
            found.append(item)

    file.visititems(visit)
    return found


def _heap_addresses(path: Path, dataset: h5py.Dataset) -> set[int]:
    """The heaps the rows of `dataset` point into, from its unfiltered chunks."""
    addresses: set[int] = set()
    with open(path, "rb") as raw:
        for number in range(dataset.id.get_num_chunks()):
            info = dataset.id.get_chunk_info(number)
            if dataset.id.get_create_plist().get_nfilters():
                return addresses  # compressed chunks: not written by packer, left to HDF5
            rows = np.frombuffer(os.pread(raw.fileno(), info.size, info.byte_offset),
                                 _ROW, count=info.size // _ROW.itemsize)
            addresses.update(np.unique(rows["heap"][rows["length"] > 0]).tolist())
    return addresses


def _heap_problem(fd: int, address: int, file_size: int) -> str | None:
    """Why the heap at `address` cannot be walked, or None."""
    header = os.pread(fd, _HEADER, address)
    if len(header) < _HEADER or header[:4] != b"GCOL":
        return "no heap signature there"
    size = int.from_bytes(header[8:16], "little")
    if size < _HEADER + _OBJECT or address + size > file_size:
        return f"a size of {size:,} bytes"
    heap, at = os.pread(fd, size, address), _HEADER
    while at + _OBJECT <= size:  # as libhdf5 walks it
        index = int.from_bytes(heap[at:at + 2], "little")
        length = int.from_bytes(heap[at + 8:at + 16], "little")
        step = _OBJECT + (length + 7) // 8 * 8 if index else length
        if step <= 0 or at + step > size:
            return f"object {index} at byte {address + at:,} has a size of {length:,}"
        at += step
    return None
