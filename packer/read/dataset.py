"""Reading a packed dataset back, whatever its format, for verify, unpack and inspect."""

import hashlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from packer.errors import DatasetError
from packer.formats import format_module
from packer.formats.webdataset import tarindex
from packer.manifest import is_packed, load_manifest
from packer.read import shards
from packer.sample import sample_digest
from packer.storage.url import is_s3


def open_packed(path) -> tuple[dict, object]:
    """The manifest and the format module of a packed dataset (local or s3://)."""
    manifest, module, _ = parts_on_disk(path)
    return manifest, module


def parts_on_disk(path) -> tuple[dict, object, Iterator]:
    """The manifest, the format module, and each part on local disk as the format's
    `read_part` and `verify_part` take it: (part, (path, manifest, record)). A dataset in
    object storage is downloaded part by part into the cache, each held while in use."""
    if is_s3(path):
        from packer.read.remote import RemoteParts

        remote = RemoteParts(path)
        return remote.manifest, remote.module, _remote_parts(remote)
    manifest = load_manifest(path)
    local = ((part, (Path(path), manifest, part)) for part in manifest["parts"])
    return manifest, format_module(manifest["format"]), local


def _remote_parts(remote) -> Iterator:
    for index, part in enumerate(remote.manifest["parts"]):
        with remote.held_part(index) as on_disk:
            yield part, on_disk


def iter_samples(path) -> Iterator[dict]:
    """Every sample, in order, as a dict of bytes (and int class ids). A part that
    holds another number of samples than the manifest says, or other samples than its
    digest says, is a DatasetError when its end is reached."""
    manifest, module, parts = parts_on_disk(path)
    for part, on_disk in parts:
        seen, digest = 0, hashlib.sha256() if "samples_sha256" in part else None
        for sample in module.read_part(*on_disk):
            if digest is not None:
                digest.update(sample_digest(sample))
            seen += 1
            yield sample
        name = part.get("name", f"samples {part['first']:,}..")
        if seen != part["count"]:
            raise DatasetError(f"{f'{path}/{name}' if 'name' in part else path}: {seen:,} "
                               f"samples in part {part['index']}, the manifest says "
                               f"{part['count']:,}; `packer verify {path}` tells more")
        if digest is not None and digest.hexdigest() != part["samples_sha256"]:
            raise DatasetError(f"{path}: the samples of part {part['index']} ({name}) differ "
                               "from the manifest's digest; `packer verify DATASET --against "
                               "SOURCE` names the changed file")


def label_field(manifest: dict) -> str | None:
    """The field that holds a label given by the layout (not a file of the source)."""
    return "cls" if manifest["source"].get("labels", "none") != "none" else None


class PackedParts:
    """What the loader needs to know of a dataset: parts with their sample counts,
    class names, whether runs can start anywhere in a part, and a reader. Small and
    picklable (readers drop their handles when pickled), so it travels to spawned
    workers; local tar shards are indexed here, once, and workers share the index."""

    def __init__(self, path, manifest: dict | None = None, urls: list[str] | None = None):
        self.path, self.manifest, self.urls = path, manifest, urls
        self._shards = None  # the index of shards made by other tools, when local
        if manifest is not None:
            self._reader = format_module(manifest["format"]).reader(Path(path), manifest)
            self.part_counts = [p["count"] for p in manifest["parts"]]
            self.classes = manifest.get("classes")
            self.seekable = True
        elif any(shards.is_remote(u) for u in urls):
            self._reader = shards.StreamReader(urls)
            self.part_counts = [shards.count_remote(u) for u in urls]
            self.classes, self.seekable = None, False
        else:
            self._reader = self._shards = tarindex.Reader(urls)
            self.part_counts = [self._reader.count(i) for i in range(len(urls))]
            self.classes, self.seekable = None, True

    @property
    def count(self) -> int:
        return sum(self.part_counts)

    def reader(self, runs=None):
        """The reader of runs of samples (`runs`, the plan of this process, is for
        readers that fetch parts ahead)."""
        return self._reader

    def field_counts(self) -> tuple[dict[str, int], int]:
        """({field: samples that have it}, samples): from the manifest, or for shards
        made by other tools from the first shard's index (none for remote shards)."""
        if self.manifest is not None:
            fields = self.manifest.get("fields", {})
            return {n: f.get("count", 0) for n, f in fields.items()}, self.manifest["count"]
        if self._shards is None or not self.part_counts:
            return {}, 0
        index = self._shards.index(0)
        return dict(Counter(index.field)), index.count


def open_parts(path, cache_dir=None, cache_limit=None) -> PackedParts:
    """A packed dataset (a folder with a manifest, or one file), or plain WebDataset shards: a
    folder of .tar files, a .tar path, a brace or glob pattern, URLs, or a list. An
    `s3://` URL is read through the local cache in `cache_dir`, at most `cache_limit`."""
    if is_s3(path):
        from packer.read.remote import RemoteParts

        return RemoteParts(path, cache_dir, cache_limit)
    if isinstance(path, list | tuple) or shards.is_remote(str(path)):
        return PackedParts(path, urls=shards.expand(path))
    folder = Path(path)
    packed = is_packed(folder)
    foreign_folder = folder.is_dir() and not packed and any(folder.glob("*.tar"))
    if foreign_folder or (folder.is_file() and not packed) or any(c in str(path) for c in "{*?["):
        return PackedParts(str(path), urls=shards.expand(path))
    return PackedParts(str(path), manifest=load_manifest(folder))
