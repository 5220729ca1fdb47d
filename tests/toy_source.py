"""A source kind that no code outside this file knows: a `.toy` file of `LABEL WORD`
lines, one sample per line (its word as word.txt, its label as cls), with one option of
its own, --toy-upper (store the words upper-cased). tests/packer/sources/
test_source_protocol.py registers it, with one line, as a package in packer/sources/
would be registered."""

import hashlib
from dataclasses import dataclass
from pathlib import Path

from packer.sample import KEY, index_key
from packer.sources.base import Applies, Kind, Source
from packer.sources.options import KindOptions, option_group

NAME = "toy"
KINDS = {"toy": Kind("a toy file (.toy)", "toy files")}
OPTIONS = {"toy_upper": Applies(frozenset(KINDS))}
UNCLAIMED = "a toy file ends in .toy"
RECORDED_AS = ("toy",)
OPTIONS_MODULE = __name__  # Options and click_options are below
AGAINST_FILES = True


@dataclass
class Options(KindOptions):
    toy_upper: bool = False


click_options = option_group(Options, {"toy_upper": dict(
    flags=("--toy-upper",), is_flag=True,
    help="Toy file: store each word upper-cased, e.g. --toy-upper.")})


def claims(path: Path, spec: str | None) -> str | None:
    return "toy" if not spec and path.is_file() and path.suffix == ".toy" else None


def claims_url(url: str, spec: str | None, one_object: bool) -> None:
    return None


def summary_text(manifest: dict) -> str:
    return f"Toy: {manifest['count']} words, upper-cased: {manifest['options']['toy_upper']}"


def scan_input(path: Path, options):
    return ToySource(path, options.source), read_job


def against(manifest: dict, path: Path):
    return Against(path, Options.of(manifest["options"]))


class ToySource(Source):
    kind = "toy"

    def __init__(self, path: Path, options: Options):
        self.path, self.upper = Path(path), options.toy_upper
        data = self.path.read_bytes()
        self.lines = [line.split(" ", 1) for line in data.decode().splitlines() if line]
        self.classes = sorted({label for label, _ in self.lines})
        self.count, self.input_bytes = len(self.lines), len(data)
        self.label_source, self.scan_skipped = "toy-labels", []
        self.fingerprint = hashlib.sha256(data).hexdigest()
        self.field_specs = {"word.txt": {"dtype": "bytes"}, "cls": {"dtype": "int64"}}

    def jobs(self, start: int, size: int, check: str):
        for first in range(start, self.count, size):
            yield first, [(self.classes.index(label), word) for label, word in
                          self.lines[first:first + size]], self.upper

    def source_record(self, options) -> dict:
        return {"source": {"kind": "toy", "path": str(self.path.resolve()),
                           "labels": self.label_source, "samples": self.count,
                           "bytes": self.input_bytes}}


def read_job(job: tuple) -> list[tuple[dict, list]]:
    first, lines, upper = job
    return [({KEY: index_key(first + i), "word.txt": (word.upper() if upper else word).encode(),
              "cls": label}, []) for i, (label, word) in enumerate(lines)]


class Against:
    """verify --against FILE.toy: each packed word against its line."""

    def __init__(self, path: Path, options: Options):
        self.source = ToySource(path, options)
        self.position = 0

    def check(self, sample: dict) -> list[str]:
        if self.position >= self.source.count:
            return [f"{sample[KEY]}: packed, but {self.source.path} has no such line now"]
        (expected, _), = read_job(next(self.source.jobs(self.position, 1, "none")))
        self.position += 1
        expected = expected["word.txt"]
        return [] if sample["word.txt"] == expected else [
            f"{sample[KEY]}: word {sample['word.txt']!r}, the source has {expected!r}"]

    def unaccounted(self, manifest: dict) -> list[str]:
        return [] if self.position == self.source.count else [
            f"{self.source.path}: lines {self.position}.. were not packed"]
