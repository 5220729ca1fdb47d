"""Key columns: every row has a key, each a normalised relative path, all unique."""

from pathlib import Path

import numpy as np
import pandas as pd

from packer.errors import PackerError
from packer.sample import encode_key
from packer.sources.tables.convert import first_problems

# An empty, `.` or `..` part: such keys could name the same file as another when unpacked.
_NOT_NORMALISED = r"(?:^|/)\.{0,2}(?:/|$)"


def key_texts(path: Path, table, column: str, series: pd.Series, offset: int) -> np.ndarray:
    """A chunk's keys, escaped as file keys are; an empty or unsafe key is an error
    naming its row."""
    empty = series.isna().to_numpy()
    if empty.any():
        raise PackerError(first_problems(path, table, column, series, empty, offset,
                                         role="key column") + ": every row needs a key")
    if pd.api.types.is_float_dtype(series) and (series == series.round()).all():
        series = series.astype(np.int64)
    text = series.astype(str)
    unsafe = (text.str.contains(_NOT_NORMALISED)
              | text.str.contains("\\", regex=False)).to_numpy()
    if unsafe.any():
        raise PackerError(first_problems(path, table, column, series, unsafe, offset,
                                         role="key column")
                          + ": a key is a relative path (it names the sample's files when "
                          "unpacked): no leading or trailing /, no //, no . or .. part and "
                          "no backslash")
    return np.array([encode_key(v) for v in text], dtype=object)


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
