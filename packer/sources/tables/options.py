"""The options of the tables kind: how a table is read (its sheet, header row,
delimiter, decimal mark, encoding) and which columns become what, and their click
options (`packer pack` takes all, `packer inspect-table` the reading ones)."""

from dataclasses import dataclass

import click

from packer.sources.options import KindOptions, option_group


@dataclass
class TableOptions(KindOptions):
    sheet: str | None = None
    header_row: int | None = None
    skip_rows: int = 0
    delimiter: str | None = None
    decimal: str | None = None
    encoding: str | None = None
    label_column: tuple = ()
    feature_columns: tuple = ()
    drop_columns: tuple = ()
    key_column: str | None = None
    na: str = "fail"
    categorical: tuple = ()
    date_columns: tuple = ()
    task: str = "classify"


CLICK = {
    "label_column": dict(
        multiple=True, metavar="COL",
        help="Table: the label column (repeat, or a,b, for several: a multi-hot or "
             "multi-target float vector). Text labels become class ids."),
    "feature_columns": dict(
        multiple=True, metavar="COLS",
        help="Table: feature columns, names or globs ('f*'), repeatable or a,b "
             "(default: every numeric column except the label and key)."),
    "drop_columns": dict(
        multiple=True, metavar="COLS",
        help="Table: columns (names or globs) to leave out of the features."),
    "key_column": dict(
        metavar="COL",
        help="Table: the column whose values are the sample keys (default: the row "
             "number, zero-padded)."),
    "na": dict(
        type=click.Choice(["fail", "drop", "zero", "mean"]), show_default=True,
        help="Table: what to do with an empty or non-numeric feature cell: stop with "
             "its row, drop its row, or fill it with 0 or the column's mean."),
    "categorical": dict(
        multiple=True, metavar="COLS",
        help="Table: text columns to map to ids (sorted names, kept in the manifest)."),
    "date_columns": dict(
        multiple=True, metavar="COLS",
        help="Table: date columns, converted to seconds since the column's first "
             "date (kept in the manifest; naive dates as UTC)."),
    "task": dict(
        type=click.Choice(["classify", "regress"]), show_default=True,
        help="Table: class ids (cls) from the label, or a float target (target.npy)."),
    "sheet": dict(metavar="NAME", help="Excel: the sheet to read (default: the first)."),
    "header_row": dict(
        type=click.IntRange(min=1), metavar="N",
        help="Table: the row (1-based, as a spreadsheet shows it) holding the column names "
             "(default: guessed; title lines above it are skipped)."),
    "skip_rows": dict(
        type=click.IntRange(min=0), show_default=True,
        help="Table: rows to skip after the header (a units line, say)."),
    "delimiter": dict(
        metavar="CHAR",
        help="CSV: the field delimiter (default: detected among , tab ; |)."),
    "decimal": dict(
        type=click.Choice([".", ","]),
        help="CSV: the decimal mark (default: detected: a comma when numbers such as 1,5 "
             "appear and none such as 1.5), e.g. --decimal , which also reads dots as "
             "thousands separators (1.234,5); --decimal . reads 1,234 as 1234."),
    "encoding": dict(
        metavar="NAME",
        help="CSV (and for pack, --labels files): the text encoding (default: detected; "
             "utf-8, utf-8 with BOM, GBK ...), e.g. --encoding gbk."),
}
READING = ("sheet", "header_row", "skip_rows", "delimiter", "decimal", "encoding")
Options = TableOptions  # the registry's names for them (packer/sources/base.py)
click_options = option_group(TableOptions, CLICK)
