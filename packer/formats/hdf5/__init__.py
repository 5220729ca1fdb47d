"""HDF5: one file, one dataset per field, row i of every dataset is sample i.

    OUT                  one HDF5 file: h5py.File("OUT") opens it
      __key__   (N,) utf-8 strings; none when sample i's key is its index_key
      jpg, ...  (N,) vlen uint8: the file's bytes, empty where a sample lacks it
      cls       (N,) int64 class ids
      attrs     classes (names in id order), packer_manifest (the manifest as JSON)

A binary dump is stored as its records instead (the manifest's `records` says so):

      records   (R,) compound: every record of the dump, its fields at their offsets
                in native byte order; sample i is record i, or with windows
                records i*stride .. i*stride+window-1
      cls       (N,) int64 class ids, where the samples have classes

The file is written as OUT.partial/data.h5 (beside the progress of a resumable run)
and renamed to OUT when complete. Datasets packed before the file was the dataset are
folders, OUT/manifest.json and OUT/data.h5, and read as well. A part is a block of
samples flushed together (writer.py); parts written as columns (tables) or as records
(dumps) are checked whole, by CRC-32 (reader.py). An appended dataset is an index file
at OUT over generation files beside it (generations.py).
"""

import json
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

import h5py
import msgpack

from packer.errors import DatasetError
from packer.formats.hdf5.generations import (
    INDEX_NAME,
    files_and_rows,
    index_problems,
    publish_append,
    remove_generations,
    uses_generations,
)
from packer.formats.hdf5.heaps import DamagedHeader, check_heaps
from packer.formats.hdf5.reader import Reader
from packer.formats.hdf5.writer import FILE_NAME, Hdf5Writer, dataset_names
from packer.formats.protocol import (
    READ_ERRORS,
    block_limits,
    checksum_problems,
    remove,
    sample_problems,
    shared_files,
    swap_in,
)
from packer.sample import COLUMNS, KEY, RECORDS, SAMPLES, msgpack_default
from packer.text import plural

NAME = "hdf5"
PART = "part"
SHAPES = (RECORDS, COLUMNS, SAMPLES)
PACK_OPTIONS = frozenset()
SAMPLE_DIGESTS = True
PART_KEYS = (("samples_sha256", "columns_crc32", "records_crc32"),)
WRITER = Hdf5Writer
_RUN = 1024  # samples read at a time by read_part
part_limits = block_limits
part_files = shared_files


def encode(sample: dict) -> list[bytes]:
    """msgpack, to cross the process boundary in one piece; stored column by column."""
    return [msgpack.packb(sample, use_bin_type=True, default=msgpack_default)]


def data_files(path: Path, manifest: dict) -> list[Path]:
    """The file itself, or in a dataset packed as a folder its data.h5; for an appended
    one, its index and each generation's file."""
    path = Path(path)
    if not path.is_file():
        return [path / FILE_NAME]
    files = [*files_and_rows(path, manifest)] if manifest.get("parts") else []
    return [path, *(file for file in files if file != path)]


def files_beside(name: str, manifest: dict) -> list[str]:
    """The names of the files that the dataset file `name` reads beside it: an appended
    dataset's generation files."""
    if not uses_generations(manifest):
        return []
    return [file.name for file in files_and_rows(Path(name), manifest)]


def dataset_problems(path: Path, manifest: dict) -> list[str]:
    """What verify finds wrong with the dataset as a whole: an appended one's index
    (generations.py)."""
    return index_problems(path, manifest) if uses_generations(manifest) else []


def publish(work: Path, out: Path) -> None:
    """The finished file (its manifest is in its attributes) renamed to `out`,
    replacing an old dataset (a file, or a folder of the older layout) in one step;
    an append's index and generation file put in place (generations.py)."""
    if (work / INDEX_NAME).exists():
        publish_append(work, work / FILE_NAME, out)
        return
    swap_in(work / FILE_NAME, out)
    remove(work)
    remove_generations(out)  # those of an appended dataset packed again


def manifest_in_file(path: Path) -> dict | None:
    """The manifest in the `packer_manifest` attribute of a packed HDF5 file."""
    if not h5py.is_hdf5(path):
        return None
    try:
        with h5py.File(path, "r") as file:
            stored = "packer_manifest" in file.attrs
            in_heap = stored and file.attrs.get_id("packer_manifest").get_type() \
                .is_variable_str()
        if in_heap:  # it may share a heap with the rows: a damaged one would hang the read
            with suppress(DamagedHeader):  # another object's header, which readers name
                _check_heaps_once(Path(path))
        with h5py.File(path, "r") as file:
            text = file.attrs.get("packer_manifest") if stored else None
    except (OSError, KeyError, RuntimeError) as err:
        raise DatasetError(f"{path}: cannot open the HDF5 file: {err}") from None
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as err:
        raise DatasetError(f"{path}: cannot read the manifest in its attributes: {err}"
                           ) from None


def reader(path: Path, manifest: dict) -> Reader:
    """The file's reader, its heaps checked first (each generation file's), once per
    process and version of the file (heaps.py: a damaged heap would hang libhdf5 in C,
    and the loader's workers with it; the check reads the rows' references raw, about
    20 ms per 1,000 images)."""
    files = data_files(path, manifest)
    for file in files:
        _check_heaps_once(file)
    return Reader(files[0], manifest)


def read_part(path: Path, manifest: dict, part: dict) -> Iterator[dict]:
    """A part's samples, for verify, unpack and iter_samples."""
    return reader(path, manifest).read_part(part, _RUN)


def part_keys(path: Path, manifest: dict, part: dict) -> list[str]:
    """A part's keys, from the key dataset alone, whose heaps alone are checked first
    (what an append checks: the images are not read)."""
    files = data_files(path, manifest)
    for file in files:
        _check_heaps_once(file, tuple(filter(None, [dataset_names(manifest)[KEY]])))
    part_reader = Reader(files[0], manifest)
    try:
        return part_reader.keys(part["index"], 0, part["count"])
    finally:
        part_reader.close()


# (file, mtime, size, the datasets checked: None for all) of the heaps checked
_HEAPS_CHECKED: set[tuple] = set()


def _check_heaps_once(file: Path, names: tuple[str, ...] | None = None) -> None:
    """check_heaps, once per process and version of the file (and datasets)."""
    stat = file.stat()
    version = (str(file), stat.st_mtime_ns, stat.st_size)
    if (*version, None) not in _HEAPS_CHECKED and (*version, names) not in _HEAPS_CHECKED:
        check_heaps(file, names)
        _HEAPS_CHECKED.add((*version, names))


def verify_part(path: Path, manifest: dict, part: dict, name: str,
                compare) -> tuple[list[str], int]:
    """Parts written as columns or records against their CRC-32, whole (and, with
    `compare`, also sample by sample against the source); the others sample by sample."""
    if "columns_crc32" not in part and "records_crc32" not in part:
        return sample_problems(read_part(path, manifest, part), part, name, compare,
                               READ_ERRORS)
    part_reader = reader(path, manifest)
    try:
        rows, crc, values = part_reader.checksums(part)
    except READ_ERRORS as err:
        return [f"{name}: unreadable: {err}"], 0
    finally:
        part_reader.close()
    expected = part.get("columns_crc32", part.get("records_crc32"))
    problems = checksum_problems(name, part["count"], rows, crc == expected)
    if "values_crc32" in part and values != part["values_crc32"] and not problems:
        problems.append(f"{name}: the values of its records differ from the source's as "
                        "packed (values_crc32; the bytes are as written, so they are stored "
                        "in another byte order or layout than their dtype says): pack the "
                        "source again")
    if compare is not None:
        compared, _ = sample_problems(read_part(path, manifest, part), part, name, compare,
                                      READ_ERRORS)
        problems += [p for p in compared if p not in problems]
    return problems, rows


def layout_text(manifest: dict) -> str | None:
    """How the file holds a binary dump: `stored as records: 138,888 records in the
    dataset "records"; sample i is records i*128 .. i*128+255 (overlapping windows are stored
    once, in 5.0 MB)`."""
    layout = manifest.get("records")
    if not layout:
        return None
    window, stride = layout["window"], layout["stride"]
    sample = (f"records i*{stride} .. i*{stride}+{window - 1}" if window else "record i")
    stored = sum(part["bytes"] for part in manifest["parts"]) / 1e6
    once = f" (overlapping windows are stored once, in {stored:,.1f} MB)" if window else ""
    return (f"stored as records: {plural(layout['records'], 'record')} in the dataset "
            f"\"{layout['dataset']}\"; sample i is {sample}{once}")
