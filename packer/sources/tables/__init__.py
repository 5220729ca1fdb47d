"""The `tables` source kind: a CSV, TSV, Excel or Parquet table, one sample per row.

    readers.py   open a table: delimiter, sheet, header row; chunks of rows
    convert.py   which columns are features, labels, keys; checked conversion to numbers
    keys.py      a key column's values as sample keys
    stats.py     running per-column count, mean, std, min, max
    source.py    the source: the table checked, spooled and read into samples
    summary.py   what the pack summary says of a table
    report.py    what `packer inspect-table` shows
    options.py   TableOptions: how a table is read and its columns used; click options
    compare.py   `packer verify --against`: the table's rows against the samples packed

A text table's encoding is found by packer/sources/encoding.py (shared with labels
files). pandas is imported only when a table is scanned; the user's view is
docs/tables.md.
"""

from pathlib import Path

from packer.compressed import plain_name
from packer.sources.base import Applies, Kind

TABLE_SUFFIXES = (".csv", ".tsv", ".txt", ".xlsx", ".xls", ".parquet")

NAME = "tables"
CSV, EXCEL, PARQUET = "csv", "excel", "parquet"
KINDS = {
    CSV: Kind("a text table (CSV, TSV or .txt)", "CSV/TSV tables", "tables"),
    EXCEL: Kind("an Excel workbook", "Excel workbooks", "tables"),
    PARQUET: Kind("a Parquet table", "Parquet tables", "tables"),
}
_TABLES = frozenset(KINDS)
OPTIONS = {name: Applies(_TABLES) for name in (
    "label_column", "feature_columns", "drop_columns", "key_column", "na", "categorical",
    "date_columns", "task")}
OPTIONS.update(sheet=Applies(frozenset({EXCEL})), header_row=Applies(frozenset({CSV, EXCEL})),
               skip_rows=Applies(frozenset({CSV, EXCEL})), delimiter=Applies(frozenset({CSV})),
               decimal=Applies(frozenset({CSV})), encoding=Applies(frozenset({CSV})))
UNCLAIMED = ("a table must end in " + ", ".join(TABLE_SUFFIXES[:-1]) + " or "
             + TABLE_SUFFIXES[-1] + " (compressed: also .gz, .bz2 or .xz)")
RECORDED_AS = ("table",)
OPTIONS_MODULE = "packer.sources.tables.options"
AGAINST_FILES = True  # --against takes the table file


def against(manifest: dict, path: Path):
    from packer.sources.tables.compare import table_against

    return table_against(manifest, path)


def table_suffix(path) -> str:
    """`.csv` for data.csv and for data.csv.gz (.bz2, .xz): what the table is."""
    return Path(plain_name(path)).suffix.lower()


def claims(path: Path, spec: str | None) -> str | None:
    return _table_kind(path) if not spec and path.is_file() else None


def _table_kind(path) -> str | None:
    suffix = table_suffix(path)
    if suffix not in TABLE_SUFFIXES:
        return None
    return EXCEL if suffix in (".xlsx", ".xls") else PARQUET if suffix == ".parquet" else CSV


def claims_url(url: str, spec: str | None, one_object: bool) -> str | None:
    return _table_kind(url) if one_object and not spec else None


def summary_text(manifest: dict) -> str:
    """What the pack took from the table: features, labels, rows with gaps."""
    from packer.sources.tables.summary import table_text

    return table_text(manifest)


def scan_input(path: Path, options):
    """The checked and spooled table, and the function its jobs are read with."""
    from packer.sources.tables.source import TableSource, read_job

    return TableSource(path, options.source), read_job
