"""An appended HDF5 dataset: generation files beside an index file.

An append never writes into the dataset's file: HDF5 keeps no journal, so a write in
place that is killed can leave the whole file unreadable, and a reader holding it open
would see its metadata change under it. So the first append hard-links the file as
generation 0, writes its new rows into a file of their own, and puts at OUT an index
file: the manifest and classes in its attributes, and one virtual dataset per field
that spans the generation files (HDF5's own way of one dataset over several files, so
that plain h5py reads row i wherever it lies):

    OUT                          the index file: h5py.File("OUT")["jpg"][i] reads sample i
    <stem>.gen-000000<suffix>    the dataset as first packed (the same inode, unchanged)
    <stem>.gen-000001<suffix>    append 1's rows, from row 0, in datasets of the same names

Once a dataset is appended to, each part names its file (`"file"`); in one never
appended to (or appended to by a packer that copied the file), the parts have none and
lie in OUT itself. The index is swapped in at OUT in
one step, after the generation's file is in place, so a killed append leaves OUT as it
was; a reader of the old file keeps reading it. Move the files together: the index
finds them beside it by name.
"""

import json
import os
import re
from pathlib import Path

import h5py

from packer.formats.protocol import remove, swap_in, sync

INDEX_NAME = "index.h5"  # the index file, in the folder an append writes


def generation_name(dataset: str, generation: int) -> str:
    """`digits.gen-000001.h5` for the dataset file `digits.h5`."""
    path = Path(dataset)
    return f"{path.stem}.gen-{generation:06d}{path.suffix or '.h5'}"


def uses_generations(manifest: dict) -> bool:
    """Whether the dataset's rows lie in generation files (an append named them)."""
    return any("file" in part for part in manifest["parts"])


def part_file(dataset: Path, part: dict) -> Path:
    """The file that holds a part's rows."""
    return dataset.parent / part["file"] if "file" in part else dataset


def files_and_rows(dataset: Path, manifest: dict) -> dict[Path, int]:
    """Each file that holds rows, in sample order, and how many it holds."""
    rows: dict[Path, int] = {}
    for part in manifest["parts"]:
        file = part_file(dataset, part)
        rows[file] = rows.get(file, 0) + part["count"]
    return rows or {dataset: 0}


def first_rows(dataset: Path, manifest: dict) -> list[int]:
    """Each part's first row in its own file."""
    seen: dict[Path, int] = {}
    firsts = []
    for part in manifest["parts"]:
        file = part_file(dataset, part)
        firsts.append(seen.get(file, 0))
        seen[file] = firsts[-1] + part["count"]
    return firsts


def write_index(path: Path, dataset_name: str, manifest: dict,
                datasets: dict[str, tuple]) -> None:
    """The index file: `datasets` (HDF5 name -> (dtype, per-row shape)) as virtual
    datasets over the generation files, the classes and the manifest as attributes."""
    files = files_and_rows(Path(dataset_name), manifest)
    with h5py.File(path, "w", libver="latest") as index:
        for name, (dtype, shape) in datasets.items():
            layout = h5py.VirtualLayout(shape=(manifest["count"], *shape), dtype=dtype)
            at = 0
            for file, rows in files.items():
                if rows:
                    layout[at:at + rows] = h5py.VirtualSource(file.name, name,
                                                              shape=(rows, *shape))
                at += rows
            index.create_virtual_dataset(name, layout)
        index.attrs["classes"] = manifest.get("classes") or []
        index.attrs["packer_manifest"] = json.dumps(manifest)


def publish_append(work: Path, data: Path, out: Path) -> None:
    """Put an append in place: generation 0 linked (the first time), the new rows'
    file beside OUT, then the index swapped in at OUT; generation files that the new
    manifest does not name (a killed append's) removed."""
    with h5py.File(work / INDEX_NAME, "r") as index:
        generation = json.loads(index.attrs["packer_manifest"])["appends"][-1]["generation"]
    if not is_index(out):
        _link(out, out.with_name(generation_name(out.name, 0)))
    target = out.with_name(generation_name(out.name, generation))
    if data.exists():
        sync(data)
        os.replace(data, target)
    swap_in(work / INDEX_NAME, out)
    remove(work)
    remove_generations(out)


def remove_generations(out: Path) -> None:
    """Delete the generation files beside `out` that its manifest does not name (all of
    them where `out` was packed again, or is gone)."""
    named = set()
    if out.is_file() and is_index(out):
        with h5py.File(out, "r") as index:
            manifest = json.loads(index.attrs["packer_manifest"])
        named = {path.name for path in files_and_rows(out, manifest)}
    pattern = re.compile(re.escape(Path(out.name).stem) + r"\.gen-\d{6}"
                         + re.escape(Path(out.name).suffix or ".h5") + "$")
    for path in out.parent.iterdir():
        if pattern.match(path.name) and path.name not in named:
            path.unlink(missing_ok=True)


def is_index(path: Path) -> bool:
    """Whether the HDF5 file at `path` is an append's index (its datasets virtual)."""
    if not path.is_file():
        return False
    with h5py.File(path, "r") as file:
        return any(isinstance(item, h5py.Dataset) and item.is_virtual
                   for item in file.values())


def _link(source: Path, target: Path) -> None:
    """`target` as a hard link to `source`, replacing one a killed append left."""
    temporary = target.with_name(target.name + ".link")
    temporary.unlink(missing_ok=True)
    os.link(source, temporary)
    os.replace(temporary, target)
