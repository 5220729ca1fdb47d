"""Reading a packed dataset back, whatever its format, for verify, unpack and inspect."""

from collections.abc import Iterator
from pathlib import Path

from packer import shards
from packer.formats import format_module, tarindex
from packer.manifest import MANIFEST_NAME, load_manifest


def open_packed(path: Path) -> tuple[dict, object]:
    """The manifest and the format module of a packed dataset."""
    manifest = load_manifest(path)
    return manifest, format_module(manifest["format"])


def iter_samples(path: Path) -> Iterator[dict]:
    """Every sample, in order, as a dict of bytes (and int class ids)."""
    manifest, module = open_packed(path)
    for part in manifest["parts"]:
        yield from module.read_part(Path(path), manifest, part)


def label_field(manifest: dict) -> str | None:
    """The field that holds a label given by the layout (not a file of the source)."""
    return "cls" if manifest["source"].get("labels", "none") != "none" else None


class Source:
    """What the loader needs to know of a dataset: parts with their sample counts,
    class names, whether runs can start anywhere in a part, and how to read them.
    Small and picklable, so it travels to spawned workers."""

    def __init__(self, path, manifest: dict | None = None, urls: list[str] | None = None):
        self.path, self.manifest, self.urls = path, manifest, urls
        if manifest is not None:
            self.part_counts = [p["count"] for p in manifest["parts"]]
            self.classes = manifest.get("classes")
            self.seekable = True
        else:
            self.part_counts = shards.shard_counts(urls)
            self.classes = None
            self.seekable = not any(shards.is_remote(u) for u in urls)

    @property
    def count(self) -> int:
        return sum(self.part_counts)

    def reader(self):
        if self.manifest is not None:
            return format_module(self.manifest["format"]).reader(Path(self.path), self.manifest)
        if self.seekable:
            return tarindex.Reader(self.urls)
        return shards.StreamReader(self.urls)


def open_source(path) -> Source:
    """A packed dataset (a folder with a manifest), or plain WebDataset shards: a
    folder of .tar files, a .tar path, a brace or glob pattern, URLs, or a list."""
    if isinstance(path, list | tuple) or shards.is_remote(str(path)):
        return Source(path, urls=shards.expand(path))
    folder = Path(path)
    foreign_folder = folder.is_dir() and not (folder / MANIFEST_NAME).is_file() and any(
        folder.glob("*.tar"))
    if foreign_folder or folder.is_file() or any(c in str(path) for c in "{*?["):
        return Source(str(path), urls=shards.expand(path))
    return Source(str(path), manifest=load_manifest(folder))
