"""What a format declares: the protocol every module in packer/formats/ implements.

A format is one module (or package) and one line in the registry
(`packer/formats/__init__.py`); packing, verify, bench, unpack, the loader and the
CLI ask it through these names and never name it. The shared machinery it builds
on is in `packer/formats/base.py` (Writer, ProcessReader) and below (the part
checks, the default publishing of a finished folder).
"""

import ctypes
import errno
import hashlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from packer.errors import DatasetError
from packer.formats.base import Writer
from packer.sample import KEY, sample_digest

READ_ERRORS = (OSError, ValueError, KeyError, DatasetError)  # what readers raise on damaged data
BLOCK_BYTES = 64 << 20  # a block (one commit of LMDB, one flush of HDF5) holds at most this much
BLOCK_COUNT = 10_000  # ... or this many samples


class PartReader(Protocol):
    """Runs of samples by part; picklable, it opens its handles in the process that reads."""

    def read(self, part: int, start: int, count: int) -> list[dict]: ...

    def close(self) -> None: ...


class Format(Protocol):
    """A format module. Its constants:

    NAME            the `--to` name (and the manifest's `format`)
    PART            what a part is, as a summary counts them: "shard", "part"
    SHAPES          the sample shapes its writer accepts (packer.sample: SAMPLES always,
                    COLUMNS: `WRITER.add_block`, RECORDS: `WRITER.add_records`)
    PACK_OPTIONS    the part-bound pack options it reads (packer.packing.options.PART_OPTIONS)
    SAMPLE_DIGESTS  whether its parts record `samples_sha256` over `sample_digest`s
    PART_KEYS       what each part's record in the manifest must hold: per tuple, one of
                    its keys (a damaged manifest that lacks them is refused at load)
    READ_ERRORS     the exceptions its reader raises on damaged data (verify reports them)
    WRITER          its Writer subclass: WRITER(folder, setup, max_part_bytes, max_part_count)
    """

    NAME: str
    PART: str
    SHAPES: tuple[str, ...]
    PACK_OPTIONS: frozenset[str]
    SAMPLE_DIGESTS: bool
    PART_KEYS: tuple[tuple[str, ...], ...]
    READ_ERRORS: tuple[type[BaseException], ...]
    WRITER: type[Writer]

    def part_limits(self, options) -> tuple[int, int]:
        """(most bytes, most samples) of a part for these pack options."""

    def encode(self, sample: dict) -> list[bytes]:
        """A sample's bytes as the writer stores them, in pieces (run in the workers)."""

    def reader(self, path: Path, manifest: dict) -> PartReader:
        """Random access to runs of samples, for the loader."""

    def read_part(self, path: Path, manifest: dict, part: dict) -> Iterator[dict]:
        """Every sample of one part, in order (verify, unpack, iter_samples)."""

    def data_files(self, path: Path, manifest: dict) -> list[Path]:
        """The files holding the samples (what `cat` reads and a cold cache drops)."""

    def part_files(self, part: dict) -> list[str]:
        """The files of the dataset folder that hold this part and nothing else, its own
        file first (what a reader from object storage downloads to read the part);
        none where all parts share the dataset's files (those are downloaded whole).
        A format may also give `optional_part_files(part)`: files downloaded with the
        part where the store has them (a shard's saved index); and `part_keys(path,
        manifest, part)`: a part's keys without its data (what an append checks)."""

    def verify_part(self, path: Path, manifest: dict, part: dict, name: str,
                    compare) -> tuple[list[str], int]:
        """One part against its record in the manifest: (problems, samples seen).
        `compare`, when given, checks each sample against its source (`check(sample)`)."""

    def layout_text(self, manifest: dict) -> str | None:
        """How this dataset is stored, where a summary should say it; else None."""

    def publish(self, work: Path, out: Path) -> None:
        """Put the finished work folder (data and manifest.json) in place as `out`."""

    def manifest_in_file(self, path: Path) -> dict | None:
        """The manifest of a dataset this format stores as the one file `path`; None
        when `path` is no such file (a format whose datasets are folders: always)."""


PROTOCOL_NAMES = tuple(Format.__annotations__) + tuple(
    name for name, value in vars(Format).items() if callable(value) and not name.startswith("_"))


def missing_names(module) -> list[str]:
    """The names of the protocol that a format module lacks."""
    return [name for name in PROTOCOL_NAMES if not hasattr(module, name)]


def block_limits(options) -> tuple[int, int]:
    """The part limits of formats that commit blocks of samples (read when called, so
    that a test can make blocks small)."""
    return BLOCK_BYTES, BLOCK_COUNT


def sample_problems(samples: Iterator[dict], part: dict, name: str, compare,
                    read_errors: tuple) -> tuple[list[str], int]:
    """A part read sample by sample: readable, counted, digested, compared."""
    problems, digest, seen, key = [], hashlib.sha256(), 0, None
    try:
        for sample in samples:
            if "samples_sha256" in part:
                digest.update(sample_digest(sample))
            seen, key = seen + 1, sample[KEY]
            if compare:
                problems += compare.check(sample)
    except read_errors as err:
        after = f"sample {key!r}, the {seen:,} read before it" if key else "its start"
        problems.append(f"{name}: unreadable after {after}: {err}")
    if seen != part["count"]:
        stop = f" (reading stops after sample {key!r})" if key and seen < part["count"] else ""
        problems.append(f"{name}: {seen} samples, the manifest says {part['count']}{stop}")
    elif "samples_sha256" in part and digest.hexdigest() != part["samples_sha256"]:
        problems.append(f"{name}: sample contents differ from the manifest's digest; a part "
                        "keeps one digest over its samples, so `packer verify DATASET "
                        "--against SOURCE` is what names a changed file")
    return problems, seen


def part_file_problems(folder: Path, part: dict) -> list[str]:
    """A part stored as the file `folder / part["name"]`: its size and sha256 against
    the manifest's record of it."""
    path = folder / part["name"]
    if not path.is_file():
        return [f"{part['name']}: missing"]
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    if path.stat().st_size != part["bytes"] or digest.hexdigest() != part["sha256"]:
        return [f"{part['name']}: {path.stat().st_size:,} bytes, sha256 {digest.hexdigest()[:12]}"
                f"; the manifest says {part['bytes']:,} bytes, sha256 {part['sha256'][:12]}"]
    return []


def checksum_problems(name: str, count: int, rows: int, matches: bool) -> list[str]:
    """A part checked whole (its rows and one checksum) against the manifest."""
    if rows != count:
        return [f"{name}: {rows} samples, the manifest says {count}"]
    if not matches:
        return [f"{name}: data differ from the checksum in the manifest"]
    return []


def publish_folder(work: Path, out: Path) -> None:
    """The finished `work` folder put in place as `out`."""
    swap_in(work, out)


def swap_in(new: Path, out: Path) -> None:
    """Put `new` (a file or a folder) at `out` in one step, durably: its files are
    synced first, so that a power loss never leaves an `out` that looks complete, and
    an old dataset at `out` is exchanged with it atomically (Linux's renameat2), so
    that a kill leaves either the old dataset or the new one at `out`, never none;
    the old one is then removed."""
    _sync_tree(new)
    if out.exists() and _exchange(new, out):
        remove(new)
    else:
        old = out.with_name(out.name + ".old")  # where an atomic exchange is not offered
        if out.exists():
            remove(old)
            out.rename(old)
        new.rename(out)
        remove(old)
    sync(out.parent)


def _exchange(first: Path, second: Path) -> bool:
    """Swap two paths atomically; False where the system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_cwd, exchange = -100, 2  # AT_FDCWD, RENAME_EXCHANGE
    done = renameat2(at_cwd, os.fsencode(first), at_cwd, os.fsencode(second), exchange) == 0
    if not done and ctypes.get_errno() not in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()), str(second))
    return done


def _sync_tree(path: Path) -> None:
    paths = [path] if path.is_file() else [*path.rglob("*"), path]
    for item in paths:
        sync(item)


def sync(path: Path) -> None:
    """fsync a file or a folder (its entries)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove(path: Path) -> None:
    """Remove a dataset, a folder or a single file, if it is there."""
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def no_file_manifest(path: Path) -> None:
    """For a format whose datasets are folders with a manifest.json."""
    return None


def shared_files(part: dict) -> list[str]:
    """For a format whose parts are blocks of the dataset's one set of files."""
    return []


def no_layout_text(manifest: dict) -> None:
    """For a format whose datasets are all stored one way."""
    return None

