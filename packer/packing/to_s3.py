"""Packing into object storage: `packer pack SOURCE -o s3://bucket/prefix`.

The pack is written as a local one, into a staging folder in the cache

    CACHE_DIR/packing/<digest of the URL>/NAME.partial    while packing (resumable)
    CACHE_DIR/packing/<digest of the URL>/NAME            complete, until uploaded

and each part that is a file of its own (a tar shard, a TFRecord file and its index) is
uploaded as soon as it is closed, by a background thread (at most UPLOADS_WAITING
waiting), with the files beside it (a shard's saved index, a TFRecord part's .tfkeys:
the format's `optional_part_files`; an index still being saved when its shard closes
goes up with the next part). When the pack is complete, the files not yet in the store
(the last part's) are uploaded and the manifest last, so that the store holds every
file of a local pack: a dataset whose manifest is in the store is complete, and readers
refuse a prefix without one. A dataset that is one file (HDF5) is one object at the
URL, which the store shows only once its upload is complete. Large files go up as
multipart uploads (boto3's transfer manager). An interrupted run leaves the staging
folder and what it uploaded; `--resume` continues the local pack and uploads only
what the store lacks or holds with another size or sha256. The bytes are those of a
local pack with the same options. One run at a time writes a URL, on any machine: it
holds a lock object beside it in the bucket (packer.storage.lock) from its first look
at the URL to its last upload.
"""

import hashlib
import json
import shutil
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from packer.errors import UsageProblem
from packer.formats import format_module
from packer.formats.manifests import is_packed, local_manifest
from packer.formats.protocol import remove
from packer.manifest import MANIFEST_NAME, UNFINISHED, partial_path, write_json_atomic
from packer.packing.pipeline import check_same_input, pack_local
from packer.storage import client
from packer.storage.cache import default_dir
from packer.storage.client import StorageError, file_sha256
from packer.storage.lock import bucket_lock, lock_url
from packer.storage.url import S3Url, is_s3, parse

UPLOADS_WAITING = 2
STAGING = "packing"


def pack_to_s3(path, url: str, options) -> dict:
    """Pack `path` into the dataset at `url`; returns the manifest."""
    began = time.perf_counter()
    target = parse(url)
    client.check_bucket(target)
    staged = default_dir() / STAGING / hashlib.sha256(str(target).encode()).hexdigest()[:16] \
        / target.name
    with bucket_lock(target):  # two runs never mix their parts (nor their staging)
        manifest = _pack_and_publish(path, target, staged, options)
    manifest["seconds"] = time.perf_counter() - began
    return manifest


def _pack_and_publish(path, target: S3Url, staged: Path, options) -> dict:
    """Pack into `staged` (or take the complete pack there, for a resume of the same
    request) and publish it at `target`; under the URL's lock."""
    old = _check_target(target, staged, options)
    if old and options.overwrite and not options.resume:
        client.delete(target, [MANIFEST_NAME])  # from now on it no longer looks complete
    uploader = Uploader(target, options.to)
    request = _request(path, options)
    if is_packed(staged) and options.resume:  # packed earlier; its upload was cut short
        _check_same_request(staged, request, str(target))
        _check_same_input(path, options, staged, target)
        manifest = local_manifest(staged)
    else:  # an earlier run's complete pack goes first: publishing this one would swap it
        # into NAME.partial, where the queued upload of the last part would read its bytes
        remove(staged)
        staged.parent.mkdir(parents=True, exist_ok=True)
        (staged.parent / RECORD_NAME).unlink(missing_ok=True)
        write_json_atomic(staged.parent / REQUEST_NAME, request)
        manifest = pack_local(path, staged, replace(options, overwrite=True),
                              on_part=uploader.part_closed, record=staged.parent / RECORD_NAME)
    uploader.publish(staged, old)
    shutil.rmtree(staged.parent, ignore_errors=True)
    return manifest


REQUEST_NAME = "request.json"  # beside the staged pack: what it was packed from, and how
RECORD_NAME = "packed.json"  # beside the complete staged pack: its input as it was packed


def _request(path, options) -> dict:
    """The source and the options that shape a pack, as a resume must find them again."""
    source = str(path) if is_s3(path) else str(Path(path).resolve())
    return {"source": source, "options": json.loads(json.dumps(options.shaping(), default=str))}


def _check_same_request(staged: Path, request: dict, url: str) -> None:
    """Refuse to publish a staged pack for a resume that asks for another one: another
    source, or other options (--to, --shard-size, --check ...)."""
    try:
        then = json.loads((staged.parent / REQUEST_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        then = {}
    changed = []
    if then.get("source") != request["source"]:
        changed.append(f"the source was {then.get('source', 'not recorded')}, now "
                       f"{request['source']}")
    before, now = then.get("options") or {}, request["options"]
    changed += [f"--{name.replace('_', '-')} was {before.get(name)!r}, now {now.get(name)!r}"
                for name in sorted(set(before) | set(now)) if before.get(name) != now.get(name)]
    if changed:
        raise UsageProblem(f"{url}: --resume continues the interrupted upload of another pack "
                           f"({'; '.join(changed)}); pass the earlier source and options to "
                           "resume it, or --overwrite to pack this one")


def _check_same_input(path, options, staged: Path, target: S3Url) -> None:
    """Refuse to publish a staged pack whose input changed since it was packed (a file
    modified or removed in the same folder); an s3:// object is packed from a checked
    copy, and has no record."""
    try:
        record = json.loads((staged.parent / RECORD_NAME).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return
    except (OSError, ValueError):
        record = {"fingerprint": None}  # unreadable: not known to be the same input
    check_same_input(path, options, record, str(target))


def _check_target(target: S3Url, staged: Path, options) -> list[str]:
    """What is at the URL now (names under the prefix, or the one object); refuses to
    replace it or to continue another run unless told."""
    listing = list(client.list_objects(target)) if target.key else []
    listing = [name for name in listing if name != lock_url(target).key]  # a bucket's own
    one_object = target.key and client.head(target) is not None
    if (MANIFEST_NAME in listing or one_object) and not (options.overwrite or options.resume):
        raise UsageProblem(f"{target} already exists; pass --overwrite to replace it")
    interrupted = partial_path(staged).exists() or UNFINISHED in listing
    if interrupted and not (options.resume or options.overwrite):
        raise UsageProblem(f"{target} is left from an interrupted pack (no {MANIFEST_NAME}; "
                           f"the local part of it is in {partial_path(staged)}); pass "
                           "--resume to continue it or --overwrite to start over")
    return listing + ([target.name] if one_object else [])


class Uploader:
    """Uploads the parts of a pack as they close, then the rest, the manifest last."""

    def __init__(self, target: S3Url, fmt: str):
        self.target, self.module = target, format_module(fmt)
        self.uploaded: set[str] = set()
        self.beside: list[tuple[Path, str]] = []  # files beside parts, not yet written
        self.uploaded_beside: set[str] = set()  # checked again at publish (see there)
        self._waiting: deque[Future] = deque()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="packer-upload")
        self.failure: StorageError | None = None
        self.marked = False

    def part_closed(self, folder: Path, part: dict) -> None:
        """Queue the part's files; a failed upload stops the uploads (the pack goes on,
        and `publish` reports it: a resumed run uploads what is missing)."""
        self._collect(UPLOADS_WAITING - 1)
        if self.failure is not None:
            return
        for name in self.module.part_files(part):
            self._mark_unfinished()
            sha256 = part["sha256"] if name == part.get("name") and "sha256" in part else None
            self._waiting.append(self._pool.submit(self._upload, folder / name, name, sha256))
        beside = getattr(self.module, "optional_part_files", lambda part: [])(part)
        waiting, self.beside = self.beside + [(folder, name) for name in beside], []
        for place, name in waiting:
            if (place / name).exists():
                self.uploaded_beside.add(name)
                self._waiting.append(self._pool.submit(self._upload, place / name, name, None))
            else:  # written by the format's thread after the part closed: next time
                self.beside.append((place, name))

    def _mark_unfinished(self) -> None:
        """An object beside the parts that says they are not yet a dataset (so that no
        reader takes them for plain WebDataset shards), until the manifest is there."""
        if not self.marked:
            client.put_bytes(self.target.child(UNFINISHED), b"{}\n")
            self.marked = True

    def _upload(self, path: Path, name: str, sha256: str | None) -> None:
        try:
            client.upload(path, self.target.child(name), sha256 or file_sha256(path))
        except FileNotFoundError:  # the last part, moved as the pack completed: done later
            return
        self.uploaded.add(name)

    def _collect(self, keep: int) -> None:
        while len(self._waiting) > keep:
            try:
                self._waiting.popleft().result()
            except StorageError as err:
                self.failure = self.failure or err

    def publish(self, staged: Path, old: list[str]) -> None:
        """Upload what the store lacks of the complete pack at `staged`, the manifest
        last; then remove objects of an older dataset at the URL."""
        self._collect(0)
        self._pool.shutdown()
        if self.failure is not None:
            raise StorageError(f"{self.failure}. The pack is complete in {staged}; run the "
                               "same command with --resume to upload the rest") from None
        if staged.is_file():
            client.upload(staged, self.target, file_sha256(staged))
            return
        names = sorted(p.relative_to(staged).as_posix() for p in staged.rglob("*")
                       if p.is_file() and p.name != MANIFEST_NAME)
        stored = client.list_objects(self.target)
        self._mark_unfinished()
        for name in names:  # a file beside a part may have been one an interrupted run left,
            # sent before this run's own replaced it: it is compared again
            fresh = name in self.uploaded and name not in self.uploaded_beside
            if not fresh and not _same(staged / name, self.target.child(name), stored.get(name)):
                client.upload(staged / name, self.target.child(name), file_sha256(staged / name))
        client.upload(staged / MANIFEST_NAME, self.target.child(MANIFEST_NAME),
                      file_sha256(staged / MANIFEST_NAME))
        stale = [name for name in old if name not in names and name != MANIFEST_NAME]
        client.delete(self.target, [*stale, UNFINISHED])


def _same(path: Path, url: S3Url, stored: tuple[int, str] | None) -> bool:
    """Whether the store holds this file already: its size, and the sha256 recorded."""
    if stored is None or stored[0] != path.stat().st_size:
        return False
    found = client.head(url)
    return found is not None and found[1] == file_sha256(path)
