"""Labels files: `filename,label` CSV rows that label the files of a flat folder.

The encoding (utf-8, with or without a BOM, GBK, ...; `--encoding` overrides) and
the delimiter (`,`, tab, `;`, `|`) are detected as for tables. Paths are relative
to the packed folder: `./a.jpg` and `sub\\a.jpg` are read as `a.jpg` and `sub/a.jpg`.
The first row is a header when its first cell is a header word (filename, file,
path, name, image), or when it names no file in the folder, its label is no other
row's label, and one of the next 20 rows names a file; the pack summary shows a row
taken as a header. A `labels.csv` (or `labels.tsv`) at the top of the folder is its
labels file without `--labels` (and is not packed); `--unlabelled` packs it as a file.
"""

import csv
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from packer.errors import PackerError

_HEADER_WORDS = {"filename", "file", "path", "name", "image"}
_HEADER_LOOKAHEAD = 20  # rows after the first looked at to tell a header
LABELS_NAMES = ("labels.csv", "labels.tsv")  # at the top of a folder: its labels file


@dataclass
class LabelsFile:
    labels: dict[str, str]  # path relative to the packed folder -> label
    encoding: str  # as given with --encoding, or detected
    header: list[str] | None  # the first row, when it was taken as a header


def labels_in_folder(root: Path) -> Path | None:
    """The labels file at the top of `root`, used when no --labels is given, if any."""
    return next((root / name for name in LABELS_NAMES if (root / name).is_file()), None)


def _lines(path: Path, encoding: str | None, data: bytes | None) -> tuple[list[str], str]:
    from packer.sources.tables.readers import SAMPLE_BYTES, detect_encoding

    try:
        data = Path(path).read_bytes() if data is None else data
        encoding = encoding or detect_encoding(path, data[:SAMPLE_BYTES])
        return data.decode(encoding).splitlines(), encoding
    except (OSError, UnicodeDecodeError, LookupError) as err:
        raise PackerError(f"{path}: cannot read the labels file: {err}; pass --encoding "
                          "(for example gbk, latin-1)") from None


def _rows(lines: list[str]) -> list[tuple[int, list[str]]]:
    """(file line number, cells) of every row that is not blank."""
    from packer.sources.tables.readers import SNIFF_ROWS, detect_delimiter

    reader = csv.reader(lines, delimiter=detect_delimiter(lines[:SNIFF_ROWS], ".csv"))
    return [(reader.line_num, [cell.strip() for cell in row])
            for row in reader if any(cell.strip() for cell in row)]


def _relative(name: str) -> str:
    return PurePosixPath(name.replace("\\", "/")).as_posix()


def _is_header(rows: list[tuple[int, list[str]]], has_file: Callable[[str], bool]) -> bool:
    first, rest = rows[0][1], [row for _, row in rows[1:]]
    if first[0].lower() in _HEADER_WORDS:
        return True
    if has_file(_relative(first[0])) or first[1:2] in (row[1:2] for row in rest):
        return False
    return any(has_file(_relative(row[0])) for row in rest[:_HEADER_LOOKAHEAD])


def read_labels_file(path: Path, has_file: Callable[[str], bool], encoding: str | None = None,
                     data: bytes | None = None) -> LabelsFile:
    """The labels of `filename,label` rows, paths relative to the packed folder, in which
    `has_file(path)` says whether there is a file (to tell a header row). The file is
    read from `path`, or is `data` when given (`path` then only names it). Two rows that
    give one file different labels are an error."""
    lines, encoding = _lines(path, encoding, data)
    rows, header = _rows(lines), None
    if rows and _is_header(rows, has_file):
        header, rows = rows[0][1], rows[1:]
    labels: dict[str, tuple[str, int]] = {}
    for line, row in rows:
        if len(row) < 2 or not row[1]:
            raise PackerError(f"{path}, line {line}: expected 'filename,label', got {row!r}")
        name, label = _relative(row[0]), row[1]
        if name in labels and labels[name][0] != label:
            earlier, earlier_line = labels[name]
            raise PackerError(f"{path}: {name} has two labels: {earlier!r} on line "
                              f"{earlier_line} and {label!r} on line {line}; keep one")
        labels.setdefault(name, (label, line))
    if not labels:
        raise PackerError(f"{path}: the labels file has no rows")
    return LabelsFile({name: label for name, (label, _) in labels.items()}, encoding, header)


def label_ids(labels: dict[str, str]) -> tuple[list[str], dict[str, int], str]:
    """Class names in id order, each path's id, and how ids were given: integer labels
    from 0 up are kept as ids ("kept"); integers with a negative one are numbered in
    numeric order ("numeric order": -1, 5, 10 become 0, 1, 2); other labels are
    numbered in sorted order of their text ("sorted")."""
    numbers = [_integer(value) for value in labels.values()]
    if None not in numbers and min(numbers) >= 0:
        ids = {path: int(value) for path, value in labels.items()}
        return [str(i) for i in range(max(ids.values()) + 1)], ids, "kept"
    if None not in numbers:
        order = sorted(set(numbers))
        index = {number: i for i, number in enumerate(order)}
        return ([str(n) for n in order],
                {path: index[n] for path, n in zip(labels, numbers, strict=True)},
                "numeric order")
    classes = sorted(set(labels.values()))
    index = {name: i for i, name in enumerate(classes)}
    return classes, {path: index[value] for path, value in labels.items()}, "sorted"


def _integer(value: str) -> int | None:
    text = value.strip()
    return int(text) if text.lstrip("+-").isdigit() and text[:1] != "+" else None
