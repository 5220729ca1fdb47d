"""Datasets with planted problems for the `packer view` tests, and a reader of the page
it writes."""

import io
from html.parser import HTMLParser
from pathlib import Path

from PIL import Image

from conftest import class_images, run

PER_CLASS = 12  # images per class folder


def planted_folder(root: Path) -> Path:
    """Classes c0..c2 of PER_CLASS JPEGs of sizes 24..35 x 20; planted: c0/000.jpg again
    as c1/dup.jpg, an all-black PNG c2/black.png, a JSON sidecar c0/000.json, an empty
    file and a broken JPEG (both skipped when packed)."""
    class_images(root, 3, PER_CLASS, size=lambda i: (24 + i, 20))
    (root / "c1" / "dup.jpg").write_bytes((root / "c0" / "000.jpg").read_bytes())
    black = io.BytesIO()
    Image.new("RGB", (30, 30)).save(black, "PNG")
    (root / "c2" / "black.png").write_bytes(black.getvalue())
    (root / "c2" / "broken.jpg").write_bytes(b"\xff\xd8garbage")
    (root / "c0" / "empty.jpg").write_bytes(b"")
    (root / "c0" / "000.json").write_text('{"note": "first", "n": 1}')
    return root


def view_page(dataset, out: Path, *options) -> "Page":
    run("view", dataset, "-o", out, "-q", *options)
    return Page(out.read_text(encoding="utf-8"))


class Page(HTMLParser):
    """The parts of a page the tests look at: every tag with its attributes, the text of
    each section (by the id of its heading), and the page's text."""

    def __init__(self, html: str):
        super().__init__()
        self.html, self.tags, self.text = html, [], []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)

    def all(self, tag: str, **wanted) -> list[dict]:
        """The tags named `tag` whose attributes hold these values (a class among others)."""
        return [attrs for name, attrs in self.tags if name == tag and all(
            value == attrs.get(key) or value in (attrs.get(key) or "").split()
            for key, value in wanted.items())]

    def section(self, heading_id: str) -> str:
        """The page's text from the heading with this id to the next h2."""
        start = self.html.index(f'id="{heading_id}"')
        end = self.html.find("<h2", start)
        part = Page(self.html[start - 4:end if end > 0 else None])
        return " ".join(" ".join(part.text).split())
