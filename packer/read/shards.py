"""Plain WebDataset shards made by other tools: local paths, brace patterns,
`http(s)://` and `pipe:` URLs; plain tar files or tar files compressed with gzip,
bzip2 or xz (`.tar.gz`, `.tgz`, ...).

Local plain shards are indexed (one read per member header) and read by random
access like packer's own. Remote and compressed shards can only be streamed: they
are counted once when opened (every shard read through), and each worker streams
the shards it reads, continuing a stream where its previous run ended.
"""

import bz2
import glob
import gzip
import lzma
import subprocess
import tarfile
import urllib.request
import zlib
from pathlib import Path

from braceexpand import braceexpand

from packer.errors import DatasetError, UsageProblem
from packer.manifest import MANIFEST_NAME
from packer.sample import KEY

_REMOTE = ("http://", "https://", "pipe:")
SHARD_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")  # a folder's shards
# How a compressed shard starts, and what reads it (each says so when the file is cut).
_DECOMPRESSORS = {b"\x1f\x8b": gzip.open, b"BZh": bz2.open, b"\xfd7zXZ\x00": lzma.open}
_STREAM_ERRORS = (tarfile.TarError, EOFError, OSError, zlib.error, lzma.LZMAError)


def is_remote(url: str) -> bool:
    return url.startswith(_REMOTE)


def _decompressor(path: str):
    """The function that opens the compressed file at `path`, or None for another file."""
    with open(path, "rb") as file:
        head = file.read(6)
    return next((opener for magic, opener in _DECOMPRESSORS.items()
                 if head.startswith(magic)), None)


def must_stream(url: str) -> bool:
    """Remote shards, and compressed local ones (which cannot be indexed), are streamed."""
    return is_remote(url) or _decompressor(url) is not None


def shard_files(folder: Path) -> list[str]:
    return sorted(str(path) for path in Path(folder).iterdir()
                  if path.name.endswith(SHARD_SUFFIXES) and path.is_file())


def expand(spec) -> list[str]:
    """Shard URLs from a folder of .tar files, a brace pattern, a glob, or a list."""
    if isinstance(spec, list | tuple):
        if not spec:
            raise UsageProblem("an empty list of shards: name at least one")
        return [u for item in spec for u in expand(item)]
    spec = str(spec)
    if not is_remote(spec) and Path(spec).is_dir():
        if (Path(spec) / MANIFEST_NAME).is_file():
            raise DatasetError(f"{spec}: a packed dataset, not a folder of shards; open it by "
                               "its path alone (a list names plain WebDataset shards)")
        urls = shard_files(Path(spec))
    elif is_remote(spec):
        urls = list(braceexpand(spec))
    elif Path(spec).is_file():  # named as it is, even with pattern characters in the name
        urls = [spec]
    else:
        urls = [u for pattern in braceexpand(spec) for u in sorted(glob.glob(pattern)) or [pattern]]
    if not urls:
        raise DatasetError(f"{spec}: no shards found (files named "
                           f"{', '.join('*' + suffix for suffix in SHARD_SUFFIXES)})")
    missing = [u for u in urls if not is_remote(u) and not Path(u).is_file()]
    if missing:
        raise DatasetError(f"{missing[0]}: no such shard ({len(missing)} of {len(urls)} missing)")
    return urls


class _Stream:
    """A remote or compressed shard as a binary stream; closing it waits for a `pipe:`
    command."""

    def __init__(self, url: str):
        self.url, self.process = url, None
        if not is_remote(url):
            self.file = _decompressor(url)(url, "rb")
        elif url.startswith("pipe:"):
            self.process = subprocess.Popen(url[5:], shell=True, stdout=subprocess.PIPE)
            self.file = self.process.stdout
        else:
            try:
                self.file = urllib.request.urlopen(url, timeout=60)  # noqa: S310 (user's URL)
            except OSError as err:
                raise DatasetError(f"{url}: cannot open: {err}") from None

    def read(self, size: int = -1) -> bytes:
        return self.file.read(size)

    def close(self) -> None:
        self.file.close()
        if self.process is not None and self.process.wait() != 0:
            raise DatasetError(f"{self.url}: the command exited with {self.process.returncode}")


def count_streamed(url: str) -> int:
    return fields_streamed(url)[0]


def fields_streamed(url: str) -> tuple[int, dict[str, list[int]]]:
    """The samples of a streamed shard, and each field's [samples, bytes]; a shard that
    cannot be read through is a DatasetError naming it."""
    from packer.formats import webdataset  # here: packs read without it

    stream, samples, fields = _Stream(url), 0, {}
    try:
        for sample in webdataset.read_shard(stream):
            samples += 1
            for name, value in sample.items():
                if name != KEY:
                    total = fields.setdefault(name, [0, 0])
                    total[0] += 1
                    total[1] += len(value)
    except _STREAM_ERRORS as err:
        raise DatasetError(f"{url}: cannot be read through as a tar shard ({err}): a "
                           "WebDataset shard is a tar file, plain or compressed with gzip, "
                           "bzip2 or xz") from None
    finally:
        stream.close()
    return samples, fields


class StreamReader:
    """Reads runs of remote or compressed shards by streaming, continuing the open
    stream when a run starts where the previous one ended."""

    def __init__(self, urls: list[str]):
        self.urls = urls
        self._stream, self._samples, self._at = None, None, None

    def read(self, part: int, start: int, count: int) -> list[dict]:
        from packer.formats import webdataset

        if self._at != (part, start):
            self.close()
            self._stream = _Stream(self.urls[part])
            self._samples = webdataset.read_shard(self._stream)
            for _ in range(start):
                next(self._samples)
        run = [next(self._samples) for _ in range(count)]
        self._at = (part, start + count)
        return run

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
        self._stream, self._samples, self._at = None, None, None
