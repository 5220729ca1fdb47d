"""HDF5: one file, one dataset per field, row i of every dataset is sample i.

    OUT/
      manifest.json
      data.h5
        __key__   (N,) utf-8 strings; none when sample i's key is its index_key
        jpg, ...  (N,) vlen uint8: the file's bytes, empty where a sample lacks it
        cls       (N,) int64 class ids
        attrs     classes (names in id order), packer_manifest (the manifest as JSON)

A binary dump is stored as its records instead (the manifest's `records` says so):

        records   (R,) compound: every record of the dump, its fields at their offsets
                  in native byte order; sample i is record i, or with windows
                  records i*stride .. i*stride+window-1
        cls       (N,) int64 class ids, where the samples have classes

A part is a block of samples flushed together (writer.py); parts written as columns
(tables) or as records (dumps) are checked whole, by CRC-32 (reader.py).
"""

from collections.abc import Iterator
from pathlib import Path

import msgpack

from packer.formats.hdf5.reader import Reader
from packer.formats.hdf5.writer import FILE_NAME, Hdf5Writer
from packer.formats.protocol import (
    READ_ERRORS,
    block_limits,
    checksum_problems,
    publish_folder,
    sample_problems,
)
from packer.sample import COLUMNS, RECORDS, SAMPLES, msgpack_default

NAME = "hdf5"
PART = "part"
SHAPES = (RECORDS, COLUMNS, SAMPLES)
PACK_OPTIONS = frozenset()
SAMPLE_DIGESTS = True
WRITER = Hdf5Writer
_RUN = 1024  # samples read at a time by read_part
part_limits = block_limits
publish = publish_folder


def encode(sample: dict) -> list[bytes]:
    """msgpack, to cross the process boundary in one piece; stored column by column."""
    return [msgpack.packb(sample, use_bin_type=True, default=msgpack_default)]


def data_files(path: Path, manifest: dict) -> list[Path]:
    return [Path(path) / FILE_NAME]


def reader(path: Path, manifest: dict) -> Reader:
    return Reader(data_files(path, manifest)[0], manifest)


def read_part(path: Path, manifest: dict, part: dict) -> Iterator[dict]:
    return reader(path, manifest).read_part(part, _RUN)


def verify_part(path: Path, manifest: dict, part: dict, name: str,
                compare) -> tuple[list[str], int]:
    """Parts written as columns or records against their CRC-32, whole; the others
    sample by sample."""
    if "columns_crc32" not in part and "records_crc32" not in part:
        return sample_problems(read_part(path, manifest, part), part, name, compare,
                               READ_ERRORS)
    part_reader = reader(path, manifest)
    try:
        rows, crc = part_reader.checksum(part)
    except READ_ERRORS as err:
        return [f"{name}: unreadable: {err}"], 0
    finally:
        part_reader.close()
    expected = part.get("columns_crc32", part.get("records_crc32"))
    return checksum_problems(name, part["count"], rows, crc == expected), rows


def layout_text(manifest: dict) -> str | None:
    """How the file holds a binary dump: `stored as records: 138,888 records in data.h5
    "records"; sample i is records i*128 .. i*128+255 (overlapping windows are stored
    once, in 5.0 MB)`."""
    layout = manifest.get("records")
    if not layout:
        return None
    window, stride = layout["window"], layout["stride"]
    sample = (f"records i*{stride} .. i*{stride}+{window - 1}" if window else "record i")
    stored = sum(part["bytes"] for part in manifest["parts"]) / 1e6
    once = f" (overlapping windows are stored once, in {stored:,.1f} MB)" if window else ""
    return (f"stored as records: {layout['records']:,} records in {FILE_NAME} "
            f"\"{layout['dataset']}\"; sample i is {sample}{once}")
