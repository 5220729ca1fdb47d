"""Small image folders made fresh for each test."""

import io
import json
import subprocess
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from browser import browser  # noqa: F401 (the fixture of the pages' browser tests)
from click.testing import CliRunner
from PIL import Image

from packer.cli import cli
from packer.formats import FORMAT_NAMES
from s3_server import moto_server, s3  # noqa: F401 (fixtures of the s3 tests)

ROOT = Path(__file__).resolve().parent.parent  # the repository
# A pack run by `python -c KILL_AFTER_TWO_PARTS ARGS...` kills itself once two parts are saved.
KILL_AFTER_TWO_PARTS = """
import os, signal, sys
import packer.formats.protocol
import packer.packing.writing
save, calls = packer.packing.writing.save_progress, []
def save_then_die(*args):
    save(*args)
    calls.append(1)
    if len(calls) == 2:
        os.kill(os.getpid(), signal.SIGKILL)
packer.packing.writing.save_progress = save_then_die
packer.formats.protocol.BLOCK_COUNT = 3
from packer.cli import cli
from packer.formats import FORMAT_NAMES
cli(sys.argv[1:], prog_name="packer")
"""


def image_bytes(seed: int, fmt: str = "JPEG", size: tuple[int, int] = (24, 20)) -> bytes:
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, fmt)
    return out.getvalue()


def class_images(root: Path, classes: int, per_class: int | tuple[int, ...],
                 size=lambda i: (24, 20)) -> Path:
    """Class folders c0, c1, ... of `per_class` JPEGs each (or per_class[c] in class c),
    image i of `size(i)`."""
    for c in range(classes):
        (root / f"c{c}").mkdir(parents=True)
        for i in range(per_class if isinstance(per_class, int) else per_class[c]):
            (root / f"c{c}" / f"{i:03d}.jpg").write_bytes(image_bytes(c * 100 + i,
                                                                       size=size(i)))
    return root


@pytest.fixture(scope="session")
def packed_images(tmp_path_factory):
    """Image datasets packed once a session, shared by the tests that only read them:
    `packed_images(per_class, size=((w, dw), (h, dh)), max_count=, raw=, formats=)`
    gives {"images": the class folders c0, c1 ... of per_class[c] JPEGs, image i of
    (w + i % dw) x (h + i % dh) pixels; (format, "jpg"): the images packed to each of
    `formats` in parts of `max_count` samples (None: the default); (format, "raw"),
    with raw="WxH": resized to WxH and stored as raw pixels}. The same arguments give
    the same datasets; a test that damages one damages a copy."""
    made: dict[tuple, dict] = {}

    def pack(per_class: tuple[int, ...] = (20, 20, 20), *, size=((24, 1), (20, 1)),
             max_count: int | None = None, raw: str | None = None,
             formats: tuple[str, ...] = tuple(FORMAT_NAMES)) -> dict:
        asked = (per_class, size, max_count, raw, formats)
        if asked not in made:
            root = tmp_path_factory.mktemp("packed")
            (w, dw), (h, dh) = size
            out = {"images": class_images(root / "images", len(per_class), per_class,
                                          size=lambda i: (w + i % dw, h + i % dh))}
            parts = ("--max-count", max_count) if max_count else ()
            variants = {"jpg": ()} | ({"raw": ("--resize", raw, "--encode", "raw")} if raw
                                      else {})
            for fmt in formats:
                for variant, options in variants.items():
                    out[fmt, variant] = root / f"{fmt}-{variant}"
                    run("pack", out["images"], "--to", fmt, "-o", out[fmt, variant], *parts,
                        *options, "-q")
            made[asked] = out
        return made[asked]

    return pack


COLOURS = [(220, 40, 40), (40, 200, 40), (40, 40, 220)]
# train fit on small images: a run of a few seconds on the CPU
FIT_OPTIONS = ["--image-size", "16", "--batch-size", "16", "--workers", "0", "--lr", "3e-3"]


@pytest.fixture(scope="session")
def colours(tmp_path_factory):
    """Three classes told apart by colour: learnable in a few epochs (images/, and wds/
    packed in parts of 30)."""
    root = tmp_path_factory.mktemp("train")
    colour_images(root / "images", COLOURS, per_class=40, spread=40)
    run("pack", root / "images", "-o", root / "wds", "--max-count", "30", "-q")
    return root


@pytest.fixture
def three_sources(tmp_path):
    """Three folders to pack and append, their classes apart: `old`: c0, c1 (3 images
    each); `new`: c2, c3 (5 each); `third`: c4 (2)."""
    old = class_images(tmp_path / "old", 2, 3)
    new = class_images(tmp_path / "new", 2, 5)
    (new / "c1").rename(new / "c3")
    (new / "c0").rename(new / "c2")
    third = class_images(tmp_path / "third", 1, 2)
    (third / "c0").rename(third / "c4")
    return old, new, third


@pytest.fixture
def image_folder(tmp_path: Path) -> Path:
    """An ImageFolder tree: 3 classes, nested folders, sidecars, awkward names."""
    root = tmp_path / "images"
    names = ["plain", "with space", "多.dots.in.name", "percent%20x", "tilde~1", "ünï"]
    seed = 0
    for cls in ["bird", "cat", "dog"]:
        for i, name in enumerate(names):
            folder = root / cls / ("deep/er" if i % 3 == 2 else "")
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{name}.jpg").write_bytes(image_bytes(seed))
            seed += 1
        (root / cls / "mask.png").write_bytes(image_bytes(seed, "PNG"))
        (root / cls / "plain.json").write_text(json.dumps({"cls": cls}))
        (root / cls / "notes.txt").write_text(f"about {cls}\n")
        (root / cls / "README").write_bytes(b"no extension")
    return root


def colour_images(folder: Path, colours: list, per_class: int, spread: float) -> Path:
    """folder/cK/N.jpg: 16x16 noisy images of one colour per class (learnable)."""
    rng = np.random.default_rng(0)
    for label, colour in enumerate(colours):
        (folder / f"c{label}").mkdir(parents=True)
        for i in range(per_class):
            pixels = np.clip(rng.normal(colour, spread, (16, 16, 3)), 0, 255).astype(np.uint8)
            out = io.BytesIO()
            Image.fromarray(pixels).save(out, "JPEG")
            (folder / f"c{label}" / f"{i}.jpg").write_bytes(out.getvalue())
    return folder


def run(*args: str, expect: int = 0):
    """Run the packer CLI in-process; asserts the exit code and returns the result."""
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == expect, result.output
    return result


def source_files(root: Path) -> dict[str, bytes]:
    """Every non-hidden file under root, by relative path."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not any(part.startswith(".") for part in p.parts)}


@contextmanager
def tmpfs(folder: Path, options: str):
    """A tmpfs mounted at `folder` with `options` ("size=6m", "ro,size=1m"): root can
    mount one; elsewhere the test is skipped."""
    folder.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)],
                      capture_output=True).returncode:
        pytest.skip(f"cannot mount a tmpfs ({options}) here")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)
