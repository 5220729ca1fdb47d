"""An appended HDF5 dataset: generation files beside an index file.

An append never writes into the dataset's file: HDF5 keeps no journal, so a write in
place that is killed can leave the whole file unreadable, and a reader holding it open
would see its metadata change under it. So the first append hard-links the file as
generation 0, writes its new rows into a file of their own, and puts at OUT an index
file: the manifest and classes in its attributes, and one virtual dataset per field
that spans the generation files (HDF5's own way of one dataset over several files, so
that plain h5py reads row i wherever it lies):

    OUT                  the index file: h5py.File("OUT")["jpg"][i] reads sample i
    OUT.gen-000000.h5    the dataset as first packed (the same inode, unchanged)
    OUT.gen-000001.h5    append 1's rows, from row 0, in datasets of the same names

Once a dataset is appended to, each part names its file (`"file"`); in one never
appended to (or appended to by a packer that copied the file), the parts have none and
lie in OUT itself. The index is swapped in at OUT in
one step, after the generation's file is in place, so a killed append leaves OUT as it
was; a reader of the old file keeps reading it. Move the files together: the index
finds them beside it by name.

packer reads the generation files itself and never opens the index's virtual datasets:
their mappings lie in a global heap without a checksum, and libhdf5 crashes on a
damaged one. `packer verify` checks them in a process of its own (`index_problems`).
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import h5py

from packer.formats.protocol import remove, swap_in, sync

INDEX_NAME = "index.h5"  # the index file, in the folder an append writes
INDEX_ATTR = "packer_generation_files"  # the index's: how many files its rows lie in


def generation_name(dataset: str, generation: int) -> str:
    """`digits.h5.gen-000001.h5` for the dataset file `digits.h5` (the whole name: the
    datasets `digits` and `digits.h5` in one folder keep files of their own)."""
    return f"{dataset}.gen-{generation:06d}.h5"


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
                if rows:  # libhdf5 reads a source's name as a format: % is %%
                    layout[at:at + rows] = h5py.VirtualSource(file.name.replace("%", "%%"),
                                                              name, shape=(rows, *shape))
                at += rows
            index.create_virtual_dataset(name, layout)
        index.attrs["classes"] = manifest.get("classes") or []
        index.attrs["packer_manifest"] = json.dumps(manifest)
        index.attrs[INDEX_ATTR] = len(files)


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
    pattern = re.compile(re.escape(out.name) + r"\.gen-\d{6}\.h5$")
    for path in out.parent.iterdir():
        if pattern.match(path.name) and path.name not in named:
            path.unlink(missing_ok=True)


def is_index(path: Path) -> bool:
    """Whether the HDF5 file at `path` is an append's index (by its attribute: its
    datasets are not opened)."""
    if not path.is_file():
        return False
    with h5py.File(path, "r") as file:
        return INDEX_ATTR in file.attrs


def _link(source: Path, target: Path) -> None:
    """`target` as a hard link to `source`, replacing another file a killed append left
    (renaming a link over another link of the same file does nothing: the temporary
    name would stay)."""
    if target.exists() and os.path.samefile(source, target):
        return
    temporary = target.with_name(target.name + ".link")
    temporary.unlink(missing_ok=True)
    os.link(source, temporary)
    os.replace(temporary, target)


_CHECK_INDEX = """
import json, sys, h5py
with h5py.File(sys.argv[1], "r") as index:
    print(json.dumps({name: [(s.file_name, s.dset_name, s.vspace.get_select_bounds()[0][0],
                              s.vspace.get_select_npoints())
                             for s in index[name].virtual_sources()] for name in index}))
"""


def index_problems(path: Path, manifest: dict) -> list[str]:
    """What is wrong with the index's virtual datasets, read in a process of their own
    (a damaged mapping crashes libhdf5): each must map its rows to the generation
    files, in order: (file name, first row, rows) each."""
    found = subprocess.run([sys.executable, "-c", _CHECK_INDEX, str(path)],
                           capture_output=True, text=True)
    if found.returncode != 0:
        why = (f"signal {-found.returncode}" if found.returncode < 0 else
               (found.stderr.strip().splitlines() or ["no message"])[-1])
        return [f"{path}: the index's virtual datasets cannot be read ({why}): plain h5py "
                "cannot read the rows through it (packer reads the generation files and "
                "is unaffected); restore the file from a copy"]
    expected, at = [], 0
    for file, rows in files_and_rows(path, manifest).items():
        if rows:
            expected.append((file.name.replace("%", "%%"), at, rows))
        at += rows
    problems = []
    for name, sources in json.loads(found.stdout).items():
        mapped = [(file, first, rows) for file, dataset, first, rows in sources
                  if dataset == name]
        if mapped != expected or len(mapped) != len(sources):
            problems.append(f"{path}: the index's virtual dataset {name!r} maps other rows "
                            f"than the manifest's files ({mapped} against {expected}); "
                            "restore the file from a copy")
    return problems
