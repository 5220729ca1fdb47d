"""Opening a table and reading it a chunk of rows at a time.

`open_table(path, ...)` gives a `Table`: its column names, where its header is, and
`chunks(columns, rows)`, data frames of at most `rows` rows holding only the named
columns. CSV/TSV files are read with pandas' C parser in chunks (memory does not
grow with the file); an Excel sheet is read whole (python-calamine through pandas,
openpyxl or xlrd only when calamine is missing; a sheet holds at most 1,048,576
rows); Parquet by record batches through pyarrow.

Rows are numbered as a spreadsheet or an editor shows them: the file's first row
is row 1, so with one title line the header is row 2 and the first data row row 3.
Only an empty cell is missing: "n/a", "NULL" and the like are kept as text, so a
numeric column that holds them is reported, not quietly filled.
"""

import codecs
import csv
import re
from collections.abc import Iterator
from pathlib import Path

import pandas as pd

from packer.compressed import PlainFile
from packer.errors import PackerError, UsageProblem
from packer.sources.encoding import detect_encoding, encoding_probe

SAMPLE_BYTES = 1 << 20  # bytes read to find the delimiter and the header (and the encoding)
SNIFF_ROWS = 30  # rows looked at to find the header
DELIMITERS = [",", "\t", ";", "|"]


def canon_text(value) -> str:
    """A cell as text: integral numbers without `.0` (1e+40 as such, not 41 digits),
    missing cells as ``."""
    if value is None or (isinstance(value, float) and value != value):
        return ""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


# A wide row read with the wrong delimiter is one field as long as the row: csv's default
# limit (128 KiB) made a table of 100,000 columns a raw _csv.Error. Python's own limit is
# process-wide; packer's readers take any field that fits in memory.
csv.field_size_limit(2**31 - 1)


def detect_delimiter(lines: list[str], suffix: str) -> str:
    """The delimiter that splits most rows into the same number (>1) of fields."""
    preferred = ["\t"] if suffix == ".tsv" else [","]
    best, best_score = None, None
    for delimiter in preferred + [d for d in DELIMITERS if d not in preferred]:
        counts = [len(r) for r in csv.reader(lines, delimiter=delimiter) if r]
        if not counts:
            continue
        width = max(set(counts), key=counts.count)
        if width < 2:
            continue
        score = (counts.count(width) / len(counts), width)
        if best_score is None or score > best_score:
            best, best_score = delimiter, score
    return best or preferred[0]


_COMMA_NUMBER = re.compile(r"[-+]?\d+,(\d+)")
_POINT_NUMBER = re.compile(r"[-+]?\d*\.\d+")


def detect_decimal(rows: list[list[str]], delimiter: str) -> str:
    """`,` when the numbers are written with a decimal comma, as European spreadsheets
    export them (`1,5` in a file not delimited by commas), and none with a point;
    else `.`. Commas followed by exactly three digits alone (`1,234`) could be
    thousands separators, and are not taken as decimal commas."""
    if delimiter == ",":
        return "."
    cells = [cell.strip() for row in rows for cell in row]
    decimals = [m.group(1) for m in map(_COMMA_NUMBER.fullmatch, cells) if m]
    points = any(_POINT_NUMBER.fullmatch(cell) for cell in cells)
    return "," if any(len(d) != 3 for d in decimals) and not points else "."


def guess_header(rows: list[list]) -> int:
    """The index of the header among the first rows: the first row with more than half
    as many filled cells as the fullest row (title lines above it have fewer)."""
    filled = [sum(1 for cell in row if canon_text(cell).strip()) for row in rows]
    most = max(filled, default=0)
    return next(i for i, n in enumerate(filled) if n * 2 > most) if most else 0


def _names(path: Path, cells: list, header_row: int) -> list[str]:
    names = [canon_text(c) or f"column_{i + 1}" for i, c in enumerate(cells)]
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in seen:
            raise PackerError(f"{path}: the header (row {header_row}) names column {name!r} "
                              f"twice (columns {seen[name] + 1} and {i + 1}); rename one, or "
                              "pass --header-row if this is not the header")
        seen[name] = i
    return names


class Table:
    """Column names and chunks of rows of one table (a CSV file, a sheet, a Parquet file)."""

    kind = "table"
    thousands: str | None = None  # the separator of `1,234` / `1.234` cells, if one is sure
    header_row: int | None = None  # 1-based row of the header in the file
    plain: PlainFile | None = None  # the plain bytes read (a compressed table's copy)
    first_data_row = 1  # 1-based row of the first data row
    names: list[str]

    def chunks(self, columns: list[str] | None, rows: int) -> Iterator[pd.DataFrame]:
        raise NotImplementedError

    def file_row(self, index: int) -> int:
        """The row of the file that holds data row `index` (0-based)."""
        return self.first_data_row + index

    def head(self, rows: int) -> pd.DataFrame:
        return next(iter(self.chunks(None, rows)), pd.DataFrame(columns=self.names))

    def table_facts(self) -> dict:
        return {"format": self.kind, "header_row": self.header_row,
                "first_data_row": self.first_data_row,
                "compression": self.plain.compression if self.plain else None}


class CsvTable(Table):
    kind = "csv"

    def __init__(self, path: Path, delimiter=None, encoding=None, header_row=None, skip_rows=0,
                 decimal=None, data: Path | None = None):
        self.path, self.data = path, data or path
        with open(self.data, "rb") as file:
            sample = file.read(SAMPLE_BYTES)
            truncated = bool(file.read(1))
            if not sample.strip():
                raise PackerError(f"{path}: the file is empty")
            self.encoding = encoding or detect_encoding(path, encoding_probe(file, sample))
        self.encoding_given = encoding is not None
        try:
            text = codecs.getincrementaldecoder(self.encoding)(errors="strict").decode(
                sample, final=not truncated)
        except LookupError:
            raise UsageProblem(f"--encoding {encoding}: not an encoding Python knows") from None
        except UnicodeDecodeError as err:
            raise PackerError(f"{path}: not valid {self.encoding} text at byte {err.start:,}; "
                              "pass --encoding (for example gbk, latin-1)") from None
        lines = text.splitlines()
        if truncated and len(lines) > 1:
            lines = lines[:-1]  # the last line may be cut
        self.delimiter = delimiter or detect_delimiter(lines[:200], self.data.suffix.lower())
        rows = list(csv.reader(lines[:max(SNIFF_ROWS, (header_row or 0) + 1)],
                               delimiter=self.delimiter))
        index = header_row - 1 if header_row else guess_header(rows)
        if index >= len(rows) or not any(c.strip() for c in rows[index]):
            raise PackerError(f"{path}: row {index + 1} is not a header (it is empty or past "
                              "the end of the file); pass --header-row N")
        self.header_row = index + 1
        self.names = _names(path, rows[index], self.header_row)
        # pandas counts the header among non-blank lines; rows after it to skip are lines
        self.header_index = sum(1 for row in rows[:index] if row)
        self.skip_after = list(range(index + 1, index + 1 + skip_rows))
        self.first_data_row = index + 2 + skip_rows
        self.decimal = decimal or detect_decimal(rows[index + 1:], self.delimiter)
        self.decimal_guessed = decimal is None
        # A decimal comma makes dots thousands separators; a decimal point that was given
        # (or a comma-delimited file) makes commas so. A guessed point is no proof.
        if self.decimal == "," or not self.decimal_guessed or self.delimiter == ",":
            self.thousands = "." if self.decimal == "," else ","

    def chunks(self, columns: list[str] | None, rows: int) -> Iterator[pd.DataFrame]:
        # Every column is parsed: with `usecols`, pandas drops the fields of a row that
        # is too long without a word, and ragged rows must be reported.
        try:
            # header=N rather than skiprows: pandas checks skiprows line by line (slow)
            # compression=None: the bytes are plain (PlainFile), whatever the name says
            reader = pd.read_csv(self.data, sep=self.delimiter, encoding=self.encoding,
                                 compression=None,
                                 header=self.header_index, skiprows=self.skip_after or None,
                                 index_col=False, chunksize=rows, decimal=self.decimal,
                                 keep_default_na=False, na_values=[""],
                                 skip_blank_lines=True, engine="c", low_memory=False)
            for frame in reader:
                if frame.shape[1] != len(self.names):
                    raise PackerError(
                        f"{self.path}: ragged rows: data rows have {frame.shape[1]} fields, "
                        f"the header (row {self.header_row}) has {len(self.names)}; every "
                        "row needs one field per column")
                frame.columns = self.names
                yield frame if columns is None else frame[columns]
        except pd.errors.EmptyDataError:
            return
        except pd.errors.ParserError as err:
            raise PackerError(f"{self.path}: ragged rows: {_parser_message(err)} "
                              f"(the header, row {self.header_row}, has {len(self.names)} "
                              "fields); every row needs one field per column") from None
        except UnicodeDecodeError as err:
            raise PackerError(f"{self.path}: not valid {self.encoding} text ({err.reason}); "
                              "pass --encoding (for example gbk, latin-1)") from None
        except ValueError as err:  # usecols beyond a short file's width, and the like
            raise PackerError(f"{self.path}: {err}") from None

    def table_facts(self) -> dict:
        return {**super().table_facts(), "encoding": self.encoding,
                "encoding_given": self.encoding_given, "delimiter": self.delimiter,
                "decimal": self.decimal, "decimal_guessed": self.decimal_guessed}


def _parser_message(err: Exception) -> str:
    """pandas' `Expected 5 fields in line 7, saw 6` (lines of the file, from 1) as rows."""
    import re

    text = str(err).strip().splitlines()[-1]
    match = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", text)
    if not match:
        return text
    return (f"row {match.group(2)} has {match.group(3)} fields, "
            f"expected {match.group(1)}")


class ExcelTable(Table):
    kind = "excel"

    def __init__(self, path: Path, sheet=None, header_row=None, skip_rows=0,
                 data: Path | None = None):
        self.path = path
        book = _excel_file(path, data or path)
        self.sheets = list(book.sheet_names)
        if sheet is None:
            sheet = self.sheets[0] if self.sheets else None
        elif sheet not in self.sheets:
            raise UsageProblem(f"--sheet {sheet}: {path} has no such sheet; its sheets are "
                               + ", ".join(repr(s) for s in self.sheets))
        self.sheet = sheet
        raw = pd.read_excel(book, sheet_name=sheet, header=None, keep_default_na=False,
                            na_values=[""])
        book.close()
        raw = raw.dropna(how="all")  # blank rows, as CSV's skip_blank_lines
        if raw.empty:
            raise PackerError(f"{path}: sheet {sheet!r} is empty")
        if header_row:
            if header_row - 1 not in raw.index:
                raise PackerError(f"{path}: row {header_row} of sheet {sheet!r} is empty or "
                                  "past its end, so it is not the header; pass --header-row N")
            index = raw.index.get_loc(header_row - 1)
        else:
            index = guess_header(raw.head(SNIFF_ROWS).values.tolist())
        self.header_row = int(raw.index[index]) + 1
        self.names = _names(path, raw.iloc[index].tolist(), self.header_row)
        self.data = raw.iloc[index + 1 + skip_rows:].copy()
        self.data.columns = self.names
        self.first_data_row = (int(self.data.index[0]) + 1 if len(self.data)
                               else self.header_row + 1 + skip_rows)
        self.rows_in_file = self.data.index.to_numpy() + 1  # blank rows were dropped

    def file_row(self, index: int) -> int:
        return int(self.rows_in_file[index])

    def chunks(self, columns: list[str] | None, rows: int) -> Iterator[pd.DataFrame]:
        data = self.data if columns is None else self.data[columns]
        for first in range(0, len(data), rows):
            yield data.iloc[first:first + rows].reset_index(drop=True).infer_objects()

    def table_facts(self) -> dict:
        return {**super().table_facts(), "sheet": self.sheet, "sheets": self.sheets}


MAX_DECLARED_CELLS = 50_000_000  # a sheet's declared cells past which its XML is weighed
CELLS_PER_XML_BYTE = 50  # more declared cells than this per byte of XML: not a real sheet
_DIMENSION = re.compile(rb'<(?:\w+:)?dimension ref="([A-Z]+)(\d+)(?::([A-Z]+)(\d+))?"')


def _check_declared_sizes(path: Path, data: Path) -> None:
    """Refuse an .xlsx whose sheet declares an absurd size (one cell at XFD1048576 in a
    1.5 KB file declares 17 billion cells): a sheet is read whole, and the reader would
    allocate every declared cell before a byte of it is read."""
    import zipfile

    if not zipfile.is_zipfile(data):
        return  # .xls, or damaged: the reader says which
    with zipfile.ZipFile(data) as book:
        for info in book.infolist():
            if not info.filename.startswith("xl/worksheets/"):
                continue
            with book.open(info) as sheet:
                found = _DIMENSION.search(sheet.read(1 << 16))
            if not found:
                continue
            first_col, first_row, last_col, last_row = found.groups()
            rows = int(last_row or first_row) - int(first_row) + 1
            cols = _column_number(last_col or first_col) - _column_number(first_col) + 1
            if rows * cols > max(MAX_DECLARED_CELLS, CELLS_PER_XML_BYTE * info.file_size):
                span = found.group(0).split(b'"')[1].decode()
                raise PackerError(
                    f"{path}: {info.filename} declares the range {span} ({rows:,} rows x "
                    f"{cols:,} columns, {rows * cols:,} cells) in {info.file_size:,} bytes of "
                    "sheet; a sheet is read whole, so reading it would take memory for every "
                    "declared cell. Delete the far cell (or its formatting) and save again, "
                    "or export the sheet as CSV")


def _column_number(letters: bytes) -> int:
    number = 0
    for letter in letters:
        number = number * 26 + letter - 64
    return number


def _excel_file(path: Path, data: Path):
    _check_declared_sizes(path, data)
    try:
        import python_calamine  # noqa: F401

        engine = "calamine"
    except ImportError:
        engine = "xlrd" if data.suffix.lower() == ".xls" else "openpyxl"
    try:
        return pd.ExcelFile(data, engine=engine)
    except Exception as err:  # every engine has its own errors for a damaged file
        raise PackerError(f"{path}: cannot read it as an Excel workbook: {err}") from None


class ParquetTable(Table):
    kind = "parquet"

    def __init__(self, path: Path, data: Path | None = None):
        import pyarrow.parquet as pq

        self.path = path
        try:
            self.file = pq.ParquetFile(data or path)
        except Exception as err:  # pyarrow raises ArrowInvalid, OSError, ...
            raise PackerError(f"{path}: cannot read it as Parquet: {err}") from None
        self.names = _names(path, self.file.schema_arrow.names, 1)
        self.header_row, self.first_data_row = None, 1
        self.rows_total = self.file.metadata.num_rows

    def chunks(self, columns: list[str] | None, rows: int) -> Iterator[pd.DataFrame]:
        for batch in self.file.iter_batches(batch_size=rows, columns=columns):
            yield batch.to_pandas()

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "file"}


def open_table(path: Path, *, sheet=None, header_row=None, skip_rows=0, delimiter=None,
               encoding=None, decimal=None) -> Table:
    """The table in `path`, by its suffix (`data.csv.gz` is a CSV: a compressed table
    is read from its decompressed copy, which lives as long as the table)."""
    path = Path(path)
    if path.stat().st_size == 0:
        raise PackerError(f"{path}: the file is empty")
    plain = PlainFile(path)
    suffix = plain.path.suffix.lower()
    if suffix in (".xlsx", ".xls"):
        table = ExcelTable(path, sheet, header_row, skip_rows or 0, plain.path)
    elif suffix == ".parquet":
        if header_row or skip_rows:
            raise UsageProblem("--header-row and --skip-rows apply to CSV and Excel; a "
                               "Parquet file names its columns itself")
        table = ParquetTable(path, plain.path)
    elif sheet:
        raise UsageProblem(f"--sheet applies to Excel workbooks; {path} is a text table")
    else:
        table = CsvTable(path, delimiter, encoding, header_row, skip_rows or 0, decimal,
                         plain.path)
    table.plain = plain
    return table

