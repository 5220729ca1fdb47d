"""The files of an LMDB dataset, and their environments opened read-only.

`data.mdb` (the environment of the dataset's folder) holds the samples of the pack;
each append adds a file of its own beside it, `gen-000001.mdb`, `gen-000002.mdb`, ...
(an environment opened with `subdir=False`), named by the manifest's part entries
(`"file"`; a part without one is in data.mdb). python-lmdb opens an environment once
per path and process: the readers of one file in a process (a training split and its
holdout, two loaders) share it, and it closes when the last lets go.
"""

import os
from pathlib import Path

import lmdb

from packer.errors import DatasetError

MAIN_FILE = "data.mdb"
GENERATION_FILE = "gen-%06d.mdb"  # % generation: the file an append writes its samples to

_OPEN: dict[str, list] = {}  # {real path: [environment, pid, readers]}


def file_names(manifest: dict) -> list[str]:
    """data.mdb, then each generation's file in sample order."""
    names = [MAIN_FILE]
    for part in manifest.get("parts", ()):
        name = part.get("file", MAIN_FILE)
        if name != names[-1]:
            names.append(name)
    return names


def layout_text(manifest: dict) -> str | None:
    """Where an appended dataset's samples lie: `stored in 2 files: data.mdb (samples
    0 .. 5,999), gen-000001.mdb (6,000 .. 6,999)`; None for data.mdb alone."""
    names = file_names(manifest)
    if len(names) == 1:
        return None
    spans = {}  # file -> (first sample, last sample + 1)
    for part in manifest["parts"]:
        name = part.get("file", MAIN_FILE)
        spans[name] = spans.get(name, (part["first"],))[0], part["first"] + part["count"]
    where = [f"{name} (samples {spans[name][0]:,} .. {spans[name][1] - 1:,})" if name in spans
             else f"{name} (no samples)" for name in names]
    return f"stored in {len(names)} files: {', '.join(where)}"


def environment_path(folder: Path, name: str) -> Path:
    """What lmdb.open takes for the file `name`: the folder for data.mdb (as packer
    always opened it), the file itself for a generation's (`subdir=False`)."""
    return Path(folder) if name == MAIN_FILE else Path(folder) / name


def data_path(path: Path) -> Path:
    """The data file of the environment at `path` (what a message names)."""
    return path / MAIN_FILE if path.is_dir() else path


def environment(path: Path):
    """The read-only environment at `path` for this process. One inherited across a
    fork is closed first (it must not be used in the child; read-only and lock-free,
    closing it is safe) and opened again."""
    key = os.path.realpath(path)
    entry = _OPEN.get(key)
    if entry is not None and entry[1] != os.getpid():
        entry[0].close()
        entry = None
    if entry is None:
        entry = _OPEN[key] = [_open_readonly(Path(path)), os.getpid(), 0]
    entry[2] += 1
    return entry[0]


def let_go(path: Path) -> None:
    """One reader of the environment at `path` in this process is done with it."""
    key = os.path.realpath(path)
    entry = _OPEN.get(key)
    if entry is not None and entry[1] == os.getpid():
        entry[2] -= 1
        if entry[2] <= 0:
            del _OPEN[key]
            entry[0].close()


def _open_readonly(path: Path):
    try:
        return lmdb.open(str(path), readonly=True, lock=False, subdir=path.is_dir(),
                         readahead=True, max_readers=1)
    except lmdb.Error as err:
        if "already open" in str(err):
            raise DatasetError(
                f"{path}: this LMDB is already open in this process (python-lmdb allows "
                "one environment per path and process, and forked workers inherit it): "
                "close your own lmdb.open() of it with env.close() before reading it "
                "through packer") from None
        raise DatasetError(f"{data_path(path)}: not a readable LMDB environment ({err}); "
                           "restore it, or pack the source again") from None


def check_environments(folder: Path, manifest: dict) -> None:
    """A DatasetError unless each file of the dataset is as long as LMDB's own meta
    pages say (a shorter file would kill the reader with SIGBUS when a page past its
    end is touched) and holds the samples the manifest's parts put in it, besides its
    meta record."""
    counts = dict.fromkeys(file_names(manifest), 0)
    for part in manifest["parts"]:
        counts[part.get("file", MAIN_FILE)] += part["count"]
    for name, count in counts.items():
        _check_file(Path(folder), name, count)


def _check_file(folder: Path, name: str, count: int) -> None:
    path = environment_path(folder, name)
    data = data_path(path)
    if not data.is_file():
        raise DatasetError(f"{data}: missing; the LMDB dataset {folder} has no such data "
                           "file (restore it, or pack the source again)")
    env = environment(path)
    try:
        pages_end = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
        entries = env.stat()["entries"]
    finally:
        let_go(path)
    size = os.path.getsize(data)
    if size < pages_end:
        raise DatasetError(f"{data}: {size:,} bytes, but LMDB's meta page says its pages end "
                           f"at byte {pages_end:,}: the file is truncated (a copy cut short "
                           "or a full disk); restore it, or pack the source again")
    if entries - 1 != count:
        raise DatasetError(f"{data}: holds {entries - 1:,} samples, but the manifest says "
                           f"{count:,}; the manifest does not belong to this data (restore "
                           "it, or pack the source again)")
