"""Tables (CSV, TSV, Excel, Parquet) as numeric features and labels.

    readers.py   open a table: encoding, delimiter, sheet, header row; chunks of rows
    convert.py   which columns are features, labels, keys; checked conversion to numbers
    stats.py     running per-column count, mean, std, min, max
    inspect.py   what `packer inspect-table` shows

The source built on these is packer/sources/tables.py; the user's view is
docs/tables.md.
"""

TABLE_SUFFIXES = (".csv", ".tsv", ".txt", ".xlsx", ".xls", ".parquet")
