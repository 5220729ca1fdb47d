"""Plain WebDataset shards made by other tools: local paths, brace patterns,
`http(s)://` and `pipe:` URLs.

Local shards are indexed (one read per member header) and read by random access
like packer's own. Remote shards can only be streamed: they are counted once
when opened (every shard read through), and each worker streams the shards it
reads, continuing a stream where its previous run ended.
"""

import glob
import subprocess
import urllib.request
from pathlib import Path

from braceexpand import braceexpand

from packer.errors import DatasetError
from packer.formats import webdataset

_REMOTE = ("http://", "https://", "pipe:")


def is_remote(url: str) -> bool:
    return url.startswith(_REMOTE)


def expand(spec) -> list[str]:
    """Shard URLs from a folder of .tar files, a brace pattern, a glob, or a list."""
    if isinstance(spec, list | tuple):
        return [u for item in spec for u in expand(item)]
    spec = str(spec)
    if not is_remote(spec) and Path(spec).is_dir():
        urls = sorted(str(p) for p in Path(spec).glob("*.tar"))
    elif is_remote(spec):
        urls = list(braceexpand(spec))
    else:
        urls = [u for pattern in braceexpand(spec) for u in sorted(glob.glob(pattern)) or [pattern]]
    if not urls:
        raise DatasetError(f"{spec}: no .tar shards found")
    missing = [u for u in urls if not is_remote(u) and not Path(u).is_file()]
    if missing:
        raise DatasetError(f"{missing[0]}: no such shard ({len(missing)} of {len(urls)} missing)")
    return urls


class _Stream:
    """A remote shard as a binary stream; closing it waits for a `pipe:` command."""

    def __init__(self, url: str):
        self.url, self.process = url, None
        if url.startswith("pipe:"):
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


def count_remote(url: str) -> int:
    stream = _Stream(url)
    try:
        return sum(1 for _ in webdataset.read_shard(stream))
    finally:
        stream.close()


class StreamReader:
    """Reads runs of remote shards by streaming, continuing the open stream when a
    run starts where the previous one ended."""

    def __init__(self, urls: list[str]):
        self.urls = urls
        self._stream, self._samples, self._at = None, None, None

    def read(self, part: int, start: int, count: int) -> list[dict]:
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
