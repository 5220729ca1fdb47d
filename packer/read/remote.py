"""Datasets in object storage (`s3://bucket/prefix`), read through the local part cache.

What is at the URL decides how it is read:

    s3://b/x/manifest.json + parts   a packed dataset; parts that are files of their
                                     own (tar shards, TFRecord files) are downloaded
                                     part by part as the reader reaches them, a format
                                     whose parts share files (LMDB) is downloaded whole
    s3://b/x.h5                      a packed dataset that is one file: downloaded whole
    s3://b/x/*.tar, s3://b/x.tar,    plain WebDataset shards: downloaded once when opened
    s3://b/x/s-{0..9}.tar, a list    to count their samples, then read like packed ones

Each reading process (packer.read.remote_reader) downloads the next AHEAD parts of its
share of the epoch in the background (one at a time, in order) while it reads one, holds
a part only while it reads a run from it, and reads only from whole, checked parts
(packer.storage.cache).
When the cache can hold the whole dataset, runs start anywhere in a part, as for local
data; when it cannot, the loader reads parts whole, in shuffled part order with a
shuffle buffer (as streaming readers do), so that each part is downloaded once per
epoch (when the cache holds at least AHEAD + 1 parts per reading process; with less,
a part may be removed between two runs of it and downloaded again).

A dataset is known by its URL, its manifest and the ETags of its objects (plain shards
by their URLs, sizes and ETags): an object rewritten in the bucket, even at its size, is
another version, read into another cache folder, never served from an older copy. A
cached part that fails a check (verify, a reader's) is checked against its sha256 and,
if its copy in the cache is what was damaged, downloaded again, once; still wrong, the
download's check names the object.
"""

import hashlib
import json
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

from braceexpand import braceexpand

from packer.errors import DatasetError, NoSuchDataset, UsageProblem
from packer.formats import format_module, manifest_of_file
from packer.formats.manifests import check_manifest
from packer.formats.webdataset import tarindex
from packer.manifest import DIGEST_KEY, MANIFEST_NAME, UNFINISHED
from packer.read.remote_reader import RemoteReader
from packer.storage import client
from packer.storage.cache import PartCache
from packer.storage.url import S3Url, is_s3, parse


class File:
    """An object to download: its name under the dataset, URL, size and sha256."""

    def __init__(self, name: str, url: S3Url, size: int, sha256: str | None):
        self.name, self.url, self.size, self.sha256 = name, url, size, sha256

    def wanted(self) -> tuple:
        """What the cache takes (PartCache.acquire_all): name, size, sha256, how to
        fetch it, what to call it in errors."""
        return (self.name, self.size, self.sha256,
                lambda out, url=self.url, size=self.size: client.download(url, out, size),
                str(self.url))


def load_remote_manifest(url: str, cache_dir=None, cache_limit=None) -> dict:
    """The manifest of the packed dataset at `url` (a dataset that is one file is
    downloaded into the cache to read it)."""
    return RemoteParts(url, cache_dir, cache_limit).packed_manifest()


class RemoteParts:
    """A dataset in object storage as the loader sees a local one (packer.read.dataset.
    PackedParts): parts with their sample counts, classes, whether runs can start
    anywhere, a reader. Picklable: it travels to the workers without handles."""

    def __init__(self, url, cache_dir=None, cache_limit=None):
        listed = isinstance(url, list | tuple)  # plain shards, as webdataset takes them
        shards = listed_shards(url) if listed else None
        self.path, self.url = (list(url), shards[0]) if listed else (url, parse(url))
        self.cache = PartCache(cache_dir, cache_limit)
        self.manifest = None
        self.part_readers: dict[int, object] = {}  # indexes of parts read in this process
        self.rechecked: set[str] = set()  # files whose cached copy this process checked
        if listed:
            self._open_shards(shards)
        else:
            self._open_url()
        self.part_counts = ([p["count"] for p in self.manifest["parts"]] if self.manifest
                            else self.part_counts)
        self.classes = self.manifest.get("classes") if self.manifest else None
        size = sum(f.size for files in self.part_files for f in files)
        self.seekable = self.shared is not None or size <= self.cache.limit

    def _open_url(self) -> None:
        manifest_bytes = client.read_bytes(self.url.child(MANIFEST_NAME))
        if manifest_bytes is not None:
            self._open_packed(manifest_bytes)
        elif self.url.key.endswith(".tar") or "{" in self.url.key:
            self._open_shards([S3Url(self.url.bucket, key)
                               for key in sorted(set(braceexpand(self.url.key)))])
        else:
            self._open_listing()

    @property
    def count(self) -> int:
        return sum(self.part_counts)

    def __getstate__(self):  # the part readers of this process stay in it
        return {**self.__dict__, "part_readers": {}, "rechecked": set()}

    def packed_manifest(self) -> dict:
        """The manifest, or a DatasetError for shards that packer did not pack."""
        if self.manifest is None:
            raise DatasetError(f"{self.path}: WebDataset shards, not a packed dataset (no "
                               f"{MANIFEST_NAME}); `packer inspect`, `packer unpack` and "
                               "open_dataset read them")
        return self.manifest

    @property
    def module(self):
        """The format module (looked up, not kept: a module does not pickle for spawn)."""
        return format_module(self.manifest["format"]) if self.manifest else None

    def _open_packed(self, data: bytes) -> None:
        try:
            manifest = json.loads(data)
        except ValueError as err:
            raise DatasetError(f"{self.url.child(MANIFEST_NAME)}: cannot read the manifest: "
                               f"{err}") from None
        check_manifest(manifest, self.url.child(MANIFEST_NAME))
        self.manifest = manifest
        digest = manifest.get(DIGEST_KEY) or hashlib.sha256(data).hexdigest()
        listing = client.list_objects(self.url)
        # an object rewritten in the bucket (its ETag) is another version: another folder,
        # so that verify and the readers check the object, not an older copy in the cache
        self.dataset = _dataset_id(self.url, f"{digest}\n{json.dumps(sorted(listing.items()))}")
        if manifest["parts"] and self.module.part_files(manifest["parts"][0]):
            optional = getattr(self.module, "optional_part_files", lambda part: [])
            self.shared = None
            self.part_files = [[self._file(name, part, listing) for name in
                                self.module.part_files(part)
                                + [n for n in optional(part) if n in listing]]
                               for part in manifest["parts"]]
        else:
            self.shared = [self._whole(name, listing) for name in sorted(listing)
                           if name != MANIFEST_NAME]
            self.part_files = [self.shared]

    def _file(self, name: str, part: dict, listing: dict) -> File:
        """A part's file: the size and sha256 the manifest gives its own file."""
        if name not in listing:
            raise DatasetError(f"{self.url.child(name)}: missing; the manifest at "
                               f"{self.url} lists it (restore it, or pack again)")
        own = name == part.get("name")
        size = part["bytes"] if own else listing[name][0]
        return File(name, self.url.child(name), size, part.get("sha256") if own else None)

    def _whole(self, name: str, listing: dict) -> File:
        """A file shared by all parts: the sha256 packer's upload recorded, if any."""
        found = client.head(self.url.child(name))
        size, sha256 = found if found else (listing[name][0], None)
        return File(name, self.url.child(name), size, sha256)

    def _open_listing(self) -> None:
        """No manifest under the prefix: one object that is a dataset, or shards."""
        found = client.head(self.url) if self.url.key else None
        if found is not None:
            return self._open_file(*found)
        listing = client.list_objects(self.url)
        shards = sorted(name for name in listing if name.endswith(".tar"))
        if shards and UNFINISHED not in listing:
            return self._open_shards([self.url.child(n) for n in shards], listing)
        if listing:
            raise DatasetError(f"{self.url}: holds {len(listing):,} objects but no "
                               f"{MANIFEST_NAME}: an unfinished pack (the run was "
                               "interrupted or failed); finish it with `packer pack ... "
                               "--resume`")
        raise NoSuchDataset(f"{self.url}: no such dataset (no object has this prefix)")

    def _open_file(self, size: int, sha256: str | None) -> None:
        """A dataset that is one object (an HDF5 file): downloaded, its manifest read."""
        self.dataset = _dataset_id(self.url, f"{size}:{sha256}")
        self.shared = [File(self.url.name, self.url, size, sha256)]
        self.part_files = [self.shared]
        with self.held_shared() as path:
            self.manifest = manifest_of_file(path)
        if self.manifest is None:
            raise DatasetError(f"{self.url}: an object, but not a packed dataset (no "
                               "format finds its manifest in it)")
        check_manifest(self.manifest, self.url)
        beside = getattr(self.module, "files_beside", lambda name, manifest: [])
        self.shared += [self._beside(name) for name in beside(self.url.name, self.manifest)]

    def _beside(self, name: str) -> File:
        """An object beside the dataset's one (an appended HDF5 file's generations)."""
        url = self.url.sibling(name)
        found = client.head(url)
        if found is None:
            raise DatasetError(f"{url}: missing; the dataset {self.url} names it (restore "
                               "it, or upload it beside the dataset)")
        return File(name, url, *found)

    def _open_shards(self, urls: list[S3Url], listing: dict | None = None) -> None:
        """Plain WebDataset shards (`listing`: of the prefix `self.url`, when listed):
        each downloaded once to count its samples."""
        listings = {self.url: listing} if listing is not None else {}
        self.shared, self.part_files, versions = None, [], []
        for url in urls:
            folder = S3Url(url.bucket, url.key.rpartition("/")[0])
            if folder not in listings:  # one listing per folder, not a request per shard
                listings[folder] = client.list_objects(folder)
            if url.name not in listings[folder]:
                raise NoSuchDataset(f"{url}: no such shard")
            size, etag = listings[folder][url.name]
            self.part_files.append([File(f"{url.bucket}/{url.key}", url, size, None)])
            versions.append([str(url), size, etag])
        # Shards carry no digest of their own: the listing's ETags tell a shard rewritten
        # in place, at the same size, from the copy in the cache.
        self.dataset = _dataset_id(urls[0], json.dumps(versions))
        self.part_counts, self._first_fields = [], None
        for files in self.part_files:
            [held] = self.hold(files)
            try:
                index = tarindex.index_shard(str(held.path))
            finally:
                held.release()
            self.part_counts.append(index.count)
            self._first_fields = self._first_fields or (dict(Counter(index.field)), index.count)

    def field_counts(self) -> tuple[dict[str, int], int]:
        if self.manifest is not None:
            fields = self.manifest.get("fields", {})
            return {n: f.get("count", 0) for n, f in fields.items()}, self.manifest["count"]
        return self._first_fields or ({}, 0)

    def hold(self, files: list[File], recheck: bool = False) -> list:
        """Each file whole in the cache (downloaded if need be), held until released.
        `recheck`: the copies already in the cache are checked against their sha256
        first (once per file and process), and one damaged since is downloaded again."""
        if recheck:
            self.drop_damaged([file for file in files if file.name not in self.rechecked])
            self.rechecked.update(file.name for file in files)
        return self.cache.acquire_all(self.dataset, [file.wanted() for file in files])

    def drop_damaged(self, files: list[File]) -> bool:
        """Whether a cached copy of `files` no longer matched its sha256 (damaged on
        this disk): it is removed, to be downloaded again."""
        return bool(self.cache.drop_damaged(self.dataset, [file.wanted() for file in files]))

    @contextmanager
    def held_shared(self, recheck: bool = False):
        """The local path of a dataset whose parts share its files, held meanwhile."""
        held = self.hold(self.shared, recheck)
        try:
            yield self.shared_path(held)
        finally:
            for part in held:
                part.release()

    def shared_path(self, held: list) -> Path:
        """What a format reads a dataset of shared files from: the one file, or the
        cache folder that holds them."""
        one_file = self.shared[0].url == self.url  # and any files beside it
        return held[0].path if one_file else held[0].path.parent

    @contextmanager
    def held_part(self, index: int):
        """(local path, manifest, part record) to read part `index` from local disk, the
        files held meanwhile: what a format's `read_part` and `verify_part` take. Their
        cached copies are checked first: verify blames the dataset, never a copy damaged
        in the cache."""
        if self.shared is not None:
            with self.held_shared(recheck=True) as path:
                yield path, self.manifest, self.manifest["parts"][index]
            return
        held = self.hold(self.part_files[index], recheck=True)
        try:
            yield held[0].path.parent, *self.one_part(index)
        finally:
            for part in held:
                part.release()

    def one_part(self, index: int) -> tuple[dict | None, dict | None]:
        """A manifest of part `index` alone (its index 0), and that part's record."""
        if self.manifest is None:
            return None, None
        part = {**self.manifest["parts"][index], "index": 0, "first": 0}
        return {**self.manifest, "parts": [part], "count": part["count"]}, part

    def reader(self, runs=None) -> RemoteReader:
        reader = RemoteReader(self)
        reader.expect([run.part for run in runs] if runs is not None else None)
        return reader


def listed_shards(items) -> list[S3Url]:
    """The shards that a list of s3:// URLs names (brace patterns expanded), each once."""
    urls: dict[S3Url, None] = {}  # in the list's order
    for item in items:
        if not is_s3(item):
            raise UsageProblem(f"{item}: not an s3:// URL, in a list of s3:// shards; a list "
                               "names s3:// shards only, or local (and http(s)://) ones only")
        for url in map(parse, braceexpand(item)):
            if not url.key.endswith(".tar"):
                raise DatasetError(_not_a_shard(url))
            if url in urls:
                raise UsageProblem(f"{url}: named twice in the list of shards (its samples "
                                   "would be read twice an epoch)")
            urls[url] = None
    if not urls:
        raise UsageProblem("an empty list of shards: name at least one")
    return list(urls)


def _not_a_shard(url: S3Url) -> str:
    if client.read_bytes(url.child(MANIFEST_NAME)) is not None:
        return (f"{url}: a packed dataset, not a shard; open it by its URL alone (a list "
                "names plain WebDataset shards)")
    return (f"{url}: not a .tar shard; a list of s3:// URLs names WebDataset shards, such as "
            "s3://BUCKET/PREFIX/shard-000000.tar or s3://BUCKET/PREFIX/shard-{000000..000009}.tar")


def _dataset_id(url: S3Url, version: str) -> str:
    """The cache folder of one version of the dataset at `url`."""
    return hashlib.sha256(f"{url}\n{version}".encode()).hexdigest()[:16]
