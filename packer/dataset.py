"""Reading a packed dataset back, whatever its format, for verify, unpack and inspect."""

from collections.abc import Iterator
from pathlib import Path

from packer.formats import format_module
from packer.manifest import load_manifest


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
