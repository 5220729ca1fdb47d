"""Which columns are features, labels and keys, and their checked conversion to numbers.

Nothing is guessed silently: a feature cell that is not a number (or is empty) is
reported with its column, row and value unless `--na` says what to do with it, and
text columns left out of the default features are listed in the manifest.
"""

import fnmatch
import re
import shlex
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from packer.errors import PackerError, UsageProblem
from packer.sources.tables.readers import canon_text

NA_POLICIES = ("fail", "drop", "zero", "mean")
FLOAT32_MAX = float(np.finfo(np.float32).max)
TASKS = ("classify", "regress")
_GLOB = set("*?[")


LISTED_COLUMNS = 200  # columns an error lists in full; wider tables: the closest first


def _list_names(names: list[str], wanted: str | None = None) -> str:
    """The columns, for an error: all of them, or for a wide table those closest to
    `wanted` by name and then the first ones."""
    close = _closest(wanted, names) if wanted else []
    guess = f"did you mean {' or '.join(repr(n) for n in close[:3])}? " if close else ""
    if len(names) <= LISTED_COLUMNS:
        return guess + "its columns are " + ", ".join(repr(n) for n in names)
    shown = list(dict.fromkeys(close + names[:30]))
    return (guess + f"its {len(names):,} columns include " + ", ".join(repr(n) for n in shown)
            + f" and {len(names) - len(shown):,} more (`packer inspect-table` lists them all)")


def _closest(wanted: str, names: list[str]) -> list[str]:
    import difflib

    folded = {n.casefold(): n for n in names}
    same_case = [folded[wanted.casefold()]] if wanted.casefold() in folded else []
    near = difflib.get_close_matches(wanted.casefold(), list(folded), n=5, cutoff=0.6)
    return list(dict.fromkeys(same_case + [folded[n] for n in near]))


def match_columns(values, names: list[str], option: str, path) -> list[str]:
    """Columns named by `values` (names, globs, or comma-separated lists of them), in
    the table's order."""
    wanted: set[str] = set()
    for value in values:
        if value in names:
            wanted.add(value)
            continue
        parts = [value] if value in names or "," not in value else value.split(",")
        for part in (p.strip() for p in parts):
            if part in names:
                wanted.add(part)
            elif _GLOB & set(part) and fnmatch.filter(names, part):
                wanted.update(n for n in names if fnmatch.fnmatchcase(n, part))
            else:
                raise UsageProblem(f"{option} {part}: {path} has no column "
                                   f"{'matching' if _GLOB & set(part) else 'named'} {part!r}; "
                                   f"{_list_names(names, part)}")
    return [n for n in names if n in wanted]


# Numbers with thousands separators, by separator: groups of exactly three digits after
# a first group of one to three (`1.234.567,8`, `1,234.5`); with a decimal comma, also
# the plain `2,25` cells that pandas leaves as text in a column it could not convert.
_GROUPED = {".": re.compile(r"[-+]?(?:[1-9]\d{0,2}(?:\.\d{3})+(?:,\d+)?|\d*,\d+)"),
            ",": re.compile(r"[-+]?[1-9]\d{0,2}(?:,\d{3})+(?:\.\d+)?")}


def parse_numbers(series: pd.Series, thousands: str | None = None) -> pd.Series:
    """The cells as float64, NaN where a cell is not a number. With `thousands`, text
    cells written with that separator (and the other decimal mark) are numbers, and a
    cell holding the separator in any other way is not: with a decimal comma, `1.5`
    is no number, where pandas would read 1.5 (and `1.500` 1.5 beside `1.234,5`)."""
    numbers = pd.to_numeric(series, errors="coerce")
    if series.dtype == object:  # mixed cells (Excel, Parquet), not text read from a CSV
        numbers = _without_stray_bools(series, numbers)
    if thousands is None or series.dtype.kind not in "OSUT":
        return numbers
    text = series[series.notna()].astype(str).str.strip()
    grouped = text.str.fullmatch(_GROUPED[thousands])
    misread = text.str.contains(thousands, regex=False) & ~grouped
    if not grouped.any() and not misread.any():
        return numbers
    numbers = numbers.astype(np.float64)
    numbers[misread[misread].index] = np.nan
    decimal = "," if thousands == "." else "."
    cells = text[grouped]
    numbers[cells.index] = pd.to_numeric(cells.str.replace(thousands, "", regex=False)
                                         .str.replace(decimal, ".", regex=False))
    return numbers


def _without_stray_bools(series: pd.Series, numbers: pd.Series) -> pd.Series:
    """NaN for TRUE/FALSE cells (Excel, Parquet) among other filled cells, where
    pandas reads 1.0/0.0; a column of only booleans (and gaps) keeps them."""
    flags = series.map(lambda v: isinstance(v, (bool, np.bool_))).to_numpy(bool)
    if not flags.any() or flags[series.notna().to_numpy()].all():
        return numbers
    numbers = numbers.astype(np.float64)
    numbers[flags] = np.nan
    return numbers


def in_float32(values: np.ndarray) -> np.ndarray:
    """The cells float32 holds as they are: finite and within its range (1e40 would
    become inf)."""
    return np.abs(values) <= FLOAT32_MAX


def numeric_share(series: pd.Series, thousands: str | None = None) -> float | None:
    """The share of the filled cells that are numbers; None when no cell is filled."""
    if pd.api.types.is_bool_dtype(series) or pd.api.types.is_numeric_dtype(series):
        return 1.0 if series.notna().any() else None
    if pd.api.types.is_datetime64_any_dtype(series):
        return 0.0
    filled = series.dropna()
    if filled.empty:
        return None
    return float(parse_numbers(filled, thousands).notna().mean())


def inferred_type(series: pd.Series, thousands: str | None = None) -> str:
    """number, integer, text, date, bool or empty, from a sample of the column."""
    if pd.api.types.is_bool_dtype(series):
        return "bool"
    if pd.api.types.is_datetime64_any_dtype(series):
        return "date"
    share = numeric_share(series, thousands)
    if share is None:
        return "empty"
    if share > 0.5:
        numbers = parse_numbers(series, thousands).dropna()
        integral = bool((numbers == np.round(numbers)).all())
        return "integer" if integral else "number"
    if series.dropna().map(lambda v: hasattr(v, "isoformat")).all():
        return "date"
    return "text"


_COMMA_NUMBERS = r"[-+]?[\d.]*\d,\d+"


def _left_out_reason(kind: str, series: pd.Series, thousands: str | None,
                     labelled: bool = True) -> str:
    if kind == "empty":
        return "empty in the first rows"
    if kind == "date":
        return "dates; pass --date-columns to include it"
    text = series.dropna().astype(str).str.strip()
    if thousands is None and len(text) and text.str.fullmatch(_COMMA_NUMBERS).mean() > 0.5:
        return ("numbers with a comma (such as 1,234); pass --decimal , if the comma is "
                "the decimal mark, --decimal . if it separates thousands")
    if not labelled:
        return (f"text; pass --label-column {shlex.quote(str(series.name))} if it holds the "
                "labels, or "
                "--categorical to map its text to feature ids")
    return "text; pass --categorical to include it"


@dataclass
class Columns:
    """The roles of the table's columns."""

    features: list[str]
    labels: list[str]
    key: str | None
    categorical: list[str] = field(default_factory=list)
    dates: list[str] = field(default_factory=list)
    left_out: dict[str, str] = field(default_factory=dict)  # column -> why it is no feature


def choose_columns(names: list[str], sample: pd.DataFrame, options, path,
                   thousands: str | None = None) -> Columns:
    """Features, labels and key from the options; `sample` (the first rows) decides
    which columns are numeric when --feature-columns is not given."""
    labels = match_columns(options.label_column, names, "--label-column", path)
    key = None
    if options.key_column:
        key = match_columns([options.key_column], names, "--key-column", path)[0]
    categorical = match_columns(options.categorical, names, "--categorical", path)
    dates = match_columns(options.date_columns, names, "--date-columns", path)
    dropped = set(match_columns(options.drop_columns, names, "--drop-columns", path))
    special = set(labels) | {key}
    for column in categorical + dates:
        if column in special:
            raise UsageProblem(f"--categorical/--date-columns {column}: it is the label or "
                               "key column, not a feature")
    left_out: dict[str, str] = {}
    if options.feature_columns:
        chosen = set(match_columns(options.feature_columns, names, "--feature-columns", path))
    else:
        chosen = set()
        for name in names:
            if name in special or name in dropped or name in categorical or name in dates:
                continue
            kind = inferred_type(sample[name], thousands)
            if kind in ("number", "integer", "bool"):
                chosen.add(name)
            else:
                left_out[name] = _left_out_reason(kind, sample[name], thousands, bool(labels))
    chosen = (chosen | set(categorical) | set(dates)) - dropped - special
    features = [n for n in names if n in chosen]
    if not features:
        reasons = "; ".join(f"{name!r}: {why}" for name, why in left_out.items())
        raise UsageProblem(f"{path}: no feature columns (numeric columns other than the label "
                           "and key); name them with --feature-columns, or map text columns "
                           f"with --categorical; {_list_names(names)}"
                           + (f". Left out: {reasons}" if reasons else ""))
    return Columns(features, labels, key, [c for c in categorical if c in chosen],
                   [c for c in dates if c in chosen], left_out)


def _float64(series: pd.Series, thousands: str | None) -> np.ndarray:
    if pd.api.types.is_datetime64_any_dtype(series):
        return np.full(len(series), np.nan)
    if pd.api.types.is_bool_dtype(series) or pd.api.types.is_numeric_dtype(series):
        return series.to_numpy(dtype=np.float64, na_value=np.nan, copy=True)
    return parse_numbers(series, thousands).to_numpy(dtype=np.float64, copy=True,
                                                     na_value=np.nan)


def to_numbers(series: pd.Series, thousands: str | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
    """float64 values (NaN where not a number float32 holds) and the mask of those
    cells."""
    values = _float64(series, thousands)
    bad = ~in_float32(values)
    values[bad] = np.nan
    return values, bad


def too_large_shown(series: pd.Series, bad: np.ndarray, thousands: str | None) -> bool:
    """Whether a bad cell that `first_problems` shows is a finite number beyond
    float32's range."""
    values = _float64(series.iloc[np.flatnonzero(bad)[:3]], thousands)
    return bool((np.isfinite(values) & ~in_float32(values)).any())


def to_seconds(series: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Dates as Unix seconds (naive dates are taken as UTC)."""
    if pd.api.types.is_numeric_dtype(series):
        return to_numbers(series)
    try:
        dates = pd.to_datetime(series, errors="coerce", utc=True, format="mixed")
    except (TypeError, ValueError):
        dates = pd.Series(pd.NaT, index=series.index, dtype="datetime64[ns, UTC]")
    values = ((dates - pd.Timestamp(0, tz="UTC")) / pd.Timedelta(seconds=1)).to_numpy(
        dtype=np.float64, na_value=np.nan)
    return values, np.isnan(values)


class Categories:
    """Text values to ids: provisional ids in order of first sight while reading, final
    ids in sorted order (numerically when every name is an integer)."""

    def __init__(self):
        self.ids: dict[str, int] = {}

    def codes(self, series: pd.Series) -> np.ndarray:
        """Provisional ids of a chunk's cells, -1 where a cell is empty."""
        codes, uniques = pd.factorize(series, use_na_sentinel=True)
        mapped = np.empty(len(uniques) + 1, np.int64)
        mapped[-1] = -1
        for i, value in enumerate(uniques):
            text = canon_text(value)
            mapped[i] = -1 if text == "" else self.ids.setdefault(text, len(self.ids))
        return mapped[codes]

    def names(self) -> list[str]:
        names = list(self.ids)
        try:
            return sorted(names, key=int)
        except ValueError:
            return sorted(names)

    def remap(self) -> np.ndarray:
        """Provisional id -> final id."""
        order = {name: i for i, name in enumerate(self.names())}
        return np.array([order[name] for name in self.ids], np.int64)


def first_problems(path, table, column: str, series: pd.Series, bad: np.ndarray,
                   offset: int, role: str = "column") -> str:
    """`column 'size', row 1234: 'n/a'` for the first few bad cells of a chunk."""
    where = np.flatnonzero(bad)
    shown = []
    for i in where[:3]:
        value = series.iloc[i]
        shown.append(f"row {table.file_row(offset + int(i))}: {canon_text(value)!r}")
    more = f" ({len(where):,} such cells in rows {table.file_row(offset):,}.." \
           f"{table.file_row(offset + len(series) - 1):,})" if len(where) > 3 else ""
    return f"{path}: {role} {column!r}, " + "; ".join(shown) + more


def bad_cells_message(path, table, failing: list, offset: int, date_columns) -> str:
    """The first bad cells of the first column in `failing` ((name, series, bad) each),
    with what to do, and the first bad cell of every other such column."""
    name, series, bad = failing[0]
    too_large = too_large_shown(series, bad, table.thousands)
    message = (first_problems(path, table, name, series, bad, offset)
               + f": {bad_cell_hint(name in date_columns, too_large)}")
    for name, series, bad in failing[1:]:
        i = int(np.flatnonzero(bad)[0])
        message += (f"; also column {name!r}, row {table.file_row(offset + i)}: "
                    f"{canon_text(series.iloc[i])!r}")
    return message


def bad_cell_hint(in_date_column: bool, too_large: bool = False) -> str:
    """What a bad feature cell is not, and what to do about it."""
    fills = "pass --na drop to leave such rows out, --na zero or --na mean to fill them"
    if in_date_column:
        return ("not a date (as pandas reads dates: 2024-05-01, 2024-05-01 13:45:00, "
                f"05/01/2024); {fills}")
    what = (f"not a number or beyond float32 range (±{FLOAT32_MAX:.1e})" if too_large
            else "not a number")
    return (f"{what}; {fills}, --drop-columns to leave the column out, or "
            "--categorical to map its text to ids")


def fail(message: str, hint: str):
    raise PackerError(f"{message}: {hint}")
