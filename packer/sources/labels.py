"""Labels files: `filename,label` CSV rows that label the files of a flat folder."""

import csv
from pathlib import Path

from packer.errors import PackerError

_HEADER_WORDS = {"filename", "file", "path", "name", "image"}


def read_labels_file(path: Path) -> dict[str, str]:
    """`{relative path: label}` from `filename,label` rows (a header row is skipped)."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as err:
        raise PackerError(f"{path}: cannot read the labels file: {err}") from None
    rows = [row for row in csv.reader(text.splitlines()) if row and any(row)]
    if rows and rows[0][0].strip().lower() in _HEADER_WORDS:
        rows = rows[1:]
    labels = {}
    for line, row in enumerate(rows, start=1):
        if len(row) < 2 or not row[1].strip():
            raise PackerError(f"{path}, row {line}: expected 'filename,label', got {row!r}")
        labels[row[0].strip().replace("\\", "/")] = row[1].strip()
    if not labels:
        raise PackerError(f"{path}: the labels file has no rows")
    return labels


def label_ids(labels: dict[str, str]) -> tuple[list[str], dict[str, int]]:
    """Class names in id order, and each path's id: integer labels are kept as ids,
    string labels are numbered in sorted order."""
    if all(value.isdigit() for value in labels.values()):
        ids = {path: int(value) for path, value in labels.items()}
        return [str(i) for i in range(max(ids.values()) + 1)], ids
    classes = sorted(set(labels.values()))
    index = {name: i for i, name in enumerate(classes)}
    return classes, {path: index[value] for path, value in labels.items()}
