"""Key columns: every row's key must be unique."""

from pathlib import Path

import numpy as np

from packer.errors import PackerError


def check_unique_keys(path: Path, column: str, spool: Path, hashes: np.ndarray) -> None:
    """Raise, naming both rows, if two keys share a hash (keys are spooled as text)."""
    order = np.argsort(hashes, kind="stable")
    same = np.flatnonzero(hashes[order][1:] == hashes[order][:-1])
    if not len(same):
        return
    first, second = sorted((int(order[same[0]]), int(order[same[0] + 1])))
    rows = np.fromfile(spool / "rows", np.int64)
    raise PackerError(f"{path}: key column {column!r} repeats the key "
                      f"{key_at(spool, first)!r} (data rows {rows[first] + 1:,} and "
                      f"{rows[second] + 1:,}); keys must be unique: choose another "
                      "--key-column, or leave it out to key rows by their number")


def key_at(spool: Path, index: int) -> str:
    ends = np.fromfile(spool / "key_offsets", np.int64, count=2, offset=index * 8)
    with open(spool / "keys", "rb") as file:
        file.seek(int(ends[0]))
        return file.read(int(ends[1] - ends[0])).decode()
