"""A format that no code outside this file knows: each part a file `part-N.bin` of
length-prefixed msgpack samples. tests/test_format_protocol.py registers it."""

from collections.abc import Iterator
from pathlib import Path

import msgpack

from packer.formats import protocol
from packer.formats.base import Writer
from packer.formats.protocol import (
    block_limits,
    no_file_manifest,
    no_layout_text,
    publish_folder,
    sample_problems,
)
from packer.sample import SAMPLES, msgpack_default

NAME = "toy"
PART = "part file"
SHAPES = (SAMPLES,)
PACK_OPTIONS = frozenset()
SAMPLE_DIGESTS = True
PART_KEYS = (("name",), ("samples_sha256",))
READ_ERRORS = (*protocol.READ_ERRORS, msgpack.UnpackException)
part_limits = block_limits
publish = publish_folder
layout_text = no_layout_text
manifest_in_file = no_file_manifest


def encode(sample: dict) -> list[bytes]:
    data = msgpack.packb(sample, use_bin_type=True, default=msgpack_default)
    return [len(data).to_bytes(4, "little"), data]


class ToyWriter(Writer):
    def _begin_part(self, part: dict) -> None:
        part["name"] = f"part-{part['index']}.bin"
        self._file = open(self.folder / part["name"], "wb")  # noqa: SIM115 (closed when sealed)

    def _store_run(self, data, lengths) -> None:
        self._file.write(data)

    def _seal_part(self, part: dict) -> None:
        self._file.close()

    def truncate(self, count: int) -> None:
        kept = {p["name"] for p in self.parts}
        for path in self.folder.glob("part-*.bin"):
            if path.name not in kept:
                path.unlink()

    def finish(self, manifest: dict) -> None:
        pass


WRITER = ToyWriter


def read_part(path: Path, manifest: dict, part: dict) -> Iterator[dict]:
    data = (Path(path) / part["name"]).read_bytes()
    offset = 0
    while offset < len(data):
        size = int.from_bytes(data[offset:offset + 4], "little")
        yield msgpack.unpackb(data[offset + 4:offset + 4 + size], raw=False)
        offset += 4 + size


class ToyReader:
    def __init__(self, path: Path, manifest: dict):
        self.path, self.manifest = Path(path), manifest

    def read(self, part: int, start: int, count: int) -> list[dict]:
        samples = list(read_part(self.path, self.manifest, self.manifest["parts"][part]))
        return samples[start:start + count]

    def close(self) -> None:
        pass


def reader(path: Path, manifest: dict) -> ToyReader:
    return ToyReader(path, manifest)


def part_files(part: dict) -> list[str]:
    return [part["name"]]


def data_files(path: Path, manifest: dict) -> list[Path]:
    return [Path(path) / part["name"] for part in manifest["parts"]]


def verify_part(path: Path, manifest: dict, part: dict, name: str,
                compare) -> tuple[list[str], int]:
    return sample_problems(read_part(path, manifest, part), part, name, compare, READ_ERRORS)
