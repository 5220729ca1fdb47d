"""Reading a packed dataset back, whatever its format, for verify, unpack and inspect."""

import hashlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from packer.errors import DatasetError
from packer.formats import format_module
from packer.formats.manifests import is_packed, local_manifest
from packer.read import shards
from packer.sample import sample_digest
from packer.storage.url import is_s3


def load_manifest(dataset, cache_dir=None, cache_limit=None) -> dict:
    """The checked manifest of a packed dataset (a local path or an s3:// URL, whose
    files are read through the part cache in `cache_dir`, at most `cache_limit`), or a
    DatasetError that says what is wrong."""
    if is_s3(dataset):
        from packer.read.remote import load_remote_manifest  # reading from object storage

        return load_remote_manifest(dataset, cache_dir, cache_limit)
    return local_manifest(dataset)


def open_packed(path, cache_dir=None, cache_limit=None) -> tuple[dict, object]:
    """The manifest and the format module of a packed dataset (local or s3://)."""
    manifest, module, _ = parts_on_disk(path, cache_dir, cache_limit)
    return manifest, module


def parts_on_disk(path, cache_dir=None, cache_limit=None) -> tuple[dict, object, Iterator]:
    """The manifest, the format module, and each part on local disk as the format's
    `read_part` and `verify_part` take it: (part, (path, manifest, record)). A dataset in
    object storage is downloaded part by part into the cache (`cache_dir`, at most
    `cache_limit`), each held while in use."""
    if is_s3(path):
        from packer.read.remote import RemoteParts

        remote = RemoteParts(path, cache_dir, cache_limit)
        return remote.packed_manifest(), remote.module, _remote_parts(remote)
    manifest = load_manifest(path)
    local = ((part, (Path(path), manifest, part)) for part in manifest["parts"])
    module = format_module(manifest["format"])
    check_files(Path(path), manifest, module)
    return manifest, module, local


def check_files(path: Path, manifest: dict, module) -> None:
    """A DatasetError naming the first data file of the manifest's that is not there
    (a deleted shard), before any command reads a sample."""
    missing = [file for file in module.data_files(path, manifest) if not file.exists()]
    if missing:
        others = f" (and {len(missing) - 1:,} more of its files)" if len(missing) > 1 else ""
        raise DatasetError(f"{missing[0]}: missing; the {manifest['format']} dataset {path} "
                           f"lists it{others}. Restore it, or pack the source again")


def _remote_parts(remote) -> Iterator:
    for index, part in enumerate(remote.manifest["parts"]):
        with remote.held_part(index) as on_disk:
            yield part, on_disk


def iter_samples(path, cache_dir=None, cache_limit=None) -> Iterator[dict]:
    """Every sample, in order, as a dict of bytes (and int class ids). A part that
    holds another number of samples than the manifest says, or other samples than its
    digest says, is a DatasetError when its end is reached. An s3:// dataset is read
    through the part cache (`cache_dir`, at most `cache_limit`)."""
    manifest, module, parts = parts_on_disk(path, cache_dir, cache_limit)
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


class PackedParts:
    """What the loader needs to know of a dataset: parts with their sample counts,
    class names, whether runs can start anywhere in a part, and a reader. Small and
    picklable (readers drop their handles when pickled), so it travels to spawned
    workers; local tar shards are indexed here, once, and workers share the index."""

    def __init__(self, path, manifest: dict | None = None, urls: list[str] | None = None):
        self.path, self.manifest, self.urls = path, manifest, urls
        self._shards = None  # the index of shards made by other tools, when local
        self._streamed_fields = None  # the first streamed shard's {field: [samples, bytes]}
        if manifest is not None:
            module = format_module(manifest["format"])
            check_files(Path(path), manifest, module)
            self._reader = module.reader(Path(path), manifest)
            self.part_counts = [p["count"] for p in manifest["parts"]]
            self.classes = manifest.get("classes")
            self.seekable = True
        elif any(shards.must_stream(u) for u in urls):
            self._reader = shards.StreamReader(urls)
            counted = [shards.fields_streamed(u) for u in urls]
            self.part_counts = [count for count, _ in counted]
            self._streamed_fields = counted[0][1]
            self.classes, self.seekable = None, False
        else:
            from packer.formats.webdataset import tarindex  # here: packs read without it

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
        made by other tools from the first shard."""
        if self.manifest is not None:
            fields = self.manifest.get("fields", {})
            return {n: f.get("count", 0) for n, f in fields.items()}, self.manifest["count"]
        if self._streamed_fields is not None:
            return ({n: count for n, (count, _) in self._streamed_fields.items()},
                    self.part_counts[0])
        index = self._shards.index(0)
        return dict(Counter(index.field)), index.count


def plain_shards(path) -> bool:
    """Whether `path` names WebDataset shards that packer did not pack (no manifest): a
    folder of shards, a file named as a shard (.tar, .tar.gz ...) or compressed, a brace
    or glob pattern, URLs, or a list."""
    if is_s3(path):  # read (packed or not) through the part cache: see open_parts
        return False
    if isinstance(path, list | tuple) or shards.is_remote(str(path)):
        return True
    folder = Path(path)
    if not folder.exists():  # a path that exists is that path, whatever its characters
        return any(c in str(path) for c in "{*?[")
    if is_packed(folder):
        return False
    if folder.is_file():  # named as a shard, or compressed (a shard in all likelihood)
        return folder.name.endswith(shards.SHARD_SUFFIXES) or shards.must_stream(str(folder))
    return folder.is_dir() and bool(shards.shard_files(folder))


def open_parts(path, cache_dir=None, cache_limit=None) -> PackedParts:
    """A packed dataset (a folder with a manifest, or one file), or plain WebDataset shards
    (`plain_shards`). An `s3://` URL, or a list of them, is read through the local cache in
    `cache_dir`, at most `cache_limit`."""
    if is_s3(path) or (isinstance(path, list | tuple) and any(map(is_s3, path))):
        from packer.read.remote import RemoteParts

        return RemoteParts(path, cache_dir, cache_limit)
    if plain_shards(path):
        return PackedParts(path if isinstance(path, list | tuple) else str(path),
                           urls=shards.expand(path))
    return PackedParts(str(path), manifest=load_manifest(Path(path)))


def manifest_or_shards(path, cache_dir=None, cache_limit=None) -> tuple[dict | None, dict]:
    """For `packer inspect`: (the manifest, {}) of a packed dataset, or (None, what
    `shards_contents` tells) of plain WebDataset shards, local or in object storage."""
    if is_s3(path):
        from packer.read.remote import RemoteParts

        remote = RemoteParts(path, cache_dir, cache_limit)
        return (remote.manifest, {}) if remote.manifest else (None, _remote_shards(remote))
    if plain_shards(path):
        return None, shards_contents(path)
    manifest = load_manifest(path)
    check_files(Path(path), manifest, format_module(manifest["format"]))
    return manifest, {}


def shards_contents(path) -> dict:
    """What plain WebDataset shards hold, for `packer inspect`: the samples and bytes
    of each shard, and each field's samples and bytes (local plain shards from their
    index; compressed or remote ones read through)."""
    from packer.formats.webdataset import tarindex

    parts = []
    for url in shards.expand(path):
        streamed = shards.must_stream(url)
        count, fields = (shards.fields_streamed(url) if streamed
                         else _indexed_fields(tarindex.index_shard(url)))
        size = None if shards.is_remote(url) else Path(url).stat().st_size
        parts.append((url, count, fields, streamed, size))
    return _shards_report(str(path), parts)


def _remote_shards(remote) -> dict:
    """`shards_contents` of shards in object storage, from their copies in the cache."""
    from packer.formats.webdataset import tarindex

    parts = []
    for [file] in remote.part_files:
        [held] = remote.hold([file])
        try:
            count, fields = _indexed_fields(tarindex.index_shard(str(held.path)))
        finally:
            held.release()
        parts.append((str(file.url), count, fields, False, file.size))
    return _shards_report(str(remote.path), parts)


def _shards_report(path: str, parts: list[tuple]) -> dict:
    """The report of shards given as (name, samples, {field: [samples, bytes]}, streamed,
    bytes or None)."""
    fields: dict[str, list[int]] = {}
    for _, _, shard_fields, _, _ in parts:
        for name, (samples, size) in shard_fields.items():
            total = fields.setdefault(name, [0, 0])
            total[0] += samples
            total[1] += size
    return {"path": path, "format": "webdataset", "manifest": None,
            "count": sum(part[1] for part in parts),
            "fields": {name: {"count": n, "bytes": size} for name, (n, size) in fields.items()},
            "parts": [{"name": name, "count": count, "streamed": streamed, "bytes": size}
                      for name, count, _, streamed, size in parts]}


def _indexed_fields(index) -> tuple[int, dict[str, list[int]]]:
    """The samples and each field's [samples, bytes] of a tarindex.ShardIndex."""
    fields: dict[str, list[int]] = {}
    for name, size in zip(index.field, index.size.tolist(), strict=True):
        total = fields.setdefault(name, [0, 0])
        total[0] += 1
        total[1] += size
    return index.count, fields
