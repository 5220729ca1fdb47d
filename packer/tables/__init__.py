"""Tables (CSV, TSV, Excel, Parquet) as numeric features and labels.

    readers.py   open a table: delimiter, sheet, header row; chunks of rows
    encoding.py  a text table's encoding, from lines over the whole file
    convert.py   which columns are features, labels, keys; checked conversion to numbers
    stats.py     running per-column count, mean, std, min, max
    inspect.py   what `packer inspect-table` shows

The source built on these is packer/sources/tables.py; the user's view is
docs/tables.md.
"""

TABLE_SUFFIXES = (".csv", ".tsv", ".txt", ".xlsx", ".xls", ".parquet")


def table_suffix(path) -> str:
    """`.csv` for data.csv and for data.csv.gz (.bz2, .xz): what the table is."""
    from pathlib import Path

    from packer.compressed import plain_name

    return Path(plain_name(path)).suffix.lower()
