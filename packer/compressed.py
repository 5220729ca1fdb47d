"""Compressed inputs (gzip, bzip2, xz), known by their magic bytes whatever their name.

A dump is read at byte offsets (`np.fromfile`, memory maps, `copy_file_range`) and a
table reader wants a file it can seek in, which a compressed stream cannot give; so a
compressed input is decompressed once, 64 KiB at a time, into a temporary folder
(under `TMPDIR`), read from there, and deleted with the `PlainFile` that made it.
Memory stays bounded whatever the size; the disk needs room for the plain bytes.

    plain = PlainFile("train-images-idx3-ubyte.gz")
    plain.path          # the plain bytes: the file itself, or its decompressed copy
    plain.compression   # "gzip", "bz2", "xz" or None
"""

import shutil
import tempfile
import weakref
from pathlib import Path

from packer.errors import PackerError

MAGICS = {"gzip": b"\x1f\x8b", "bz2": b"BZh", "xz": b"\xfd7zXZ\x00"}
SUFFIXES = {".gz": "gzip", ".tgz": "gzip", ".bz2": "bz2", ".xz": "xz"}
COPY_BYTES = 1 << 16


def compression_of(path: Path) -> str | None:
    """The compression of a file from its first bytes; None for a plain file."""
    try:
        with open(path, "rb") as file:
            start = file.read(6)
    except OSError:
        return None
    return next((name for name, magic in MAGICS.items() if start.startswith(magic)), None)


def plain_name(path: Path) -> str:
    """`data.csv.gz` -> `data.csv`: the name without a compression suffix."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".tgz":
        return path.stem + ".tar"
    return path.stem if suffix in SUFFIXES else path.name


def _opener(compression: str):
    if compression == "gzip":
        import gzip

        return gzip.open
    if compression == "bz2":
        import bz2

        return bz2.open
    import lzma

    return lzma.open


class PlainFile:
    """An input's plain bytes: the file itself, or a decompressed copy that lives as
    long as this object does in the process that made it (a pickled copy sent to a
    worker reads the same file and never deletes it)."""

    def __init__(self, path: str | Path):
        self.source = Path(path)
        self.compression = compression_of(self.source)
        self._cleanup = None
        if self.compression is None:
            self.path = self.source
            return
        folder = Path(tempfile.mkdtemp(prefix="packer-plain-"))
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(folder), True)
        self.path = folder / plain_name(self.source)
        self._decompress()

    def _decompress(self) -> None:
        import lzma
        import zlib

        written = 0
        try:
            with _opener(self.compression)(self.source, "rb") as packed, \
                    open(self.path, "wb") as plain:
                while chunk := packed.read(COPY_BYTES):
                    plain.write(chunk)
                    written += len(chunk)
        except (EOFError, zlib.error, lzma.LZMAError, OSError, ValueError) as err:
            self._cleanup()
            if isinstance(err, OSError) and err.errno is not None:  # the disk, not the data
                raise PackerError(f"{self.source}: cannot decompress it into "
                                  f"{tempfile.gettempdir()}: {err.strerror}; set TMPDIR to a "
                                  "folder with room for the plain bytes") from None
            why = str(err) or type(err).__name__
            raise PackerError(f"{self.source}: a {self.compression} file that cannot be "
                              f"decompressed after {written:,} bytes of its contents ({why}); "
                              "it is damaged or cut short") from None

    @property
    def note(self) -> str:
        """` (gzip, decompressed)` for messages about the plain bytes; `` if plain."""
        return f" ({self.compression}, decompressed)" if self.compression else ""

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "_cleanup"}

    def __setstate__(self, state):
        self.__dict__.update(state, _cleanup=None)
