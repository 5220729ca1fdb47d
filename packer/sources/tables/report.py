"""What `packer inspect-table` reports: sheets, the header row (guessed or given), each
column's inferred type with its empty and non-numeric cell counts, and the first rows.
The whole table is read once, a chunk at a time, for the counts."""

import unicodedata
from pathlib import Path

import numpy as np
import pandas as pd

from packer.sources.tables.convert import inferred_type, to_numbers
from packer.sources.tables.readers import canon_text, open_table

CHUNK_ROWS = 1 << 16


def table_report(path: Path, *, sheet=None, header_row=None, skip_rows=0, delimiter=None,
                  encoding=None, decimal=None, rows: int = 5) -> dict:
    table = open_table(path, sheet=sheet, header_row=header_row, skip_rows=skip_rows,
                       delimiter=delimiter, encoding=encoding, decimal=decimal)
    names = table.names
    counts = {n: {"empty": 0, "non_numeric": 0, "example": None, "min": None, "max": None}
              for n in names}
    types: dict[str, str] = {}
    head: list[list] = []
    total = 0
    for frame in table.chunks(None, CHUNK_ROWS):
        if not types:
            types = {n: inferred_type(frame[n], table.thousands) for n in names}
            head = [[canon_text(v) for v in row] for row in frame.head(rows).values.tolist()]
        for name in names:
            series, entry = frame[name], counts[name]
            empty = series.isna().to_numpy()
            entry["empty"] += int(empty.sum())
            if pd.api.types.is_datetime64_any_dtype(series):
                _date_range(entry, series.dropna())
                continue
            # the cells pack rejects: text, inf, nan, numbers beyond float32 range
            numbers, bad = to_numbers(series, table.thousands)
            text = bad & ~empty
            entry["non_numeric"] += int(text.sum())
            if entry["example"] is None and text.any():
                i = int(np.flatnonzero(text)[0])
                entry["example"] = {"row": table.file_row(total + i),
                                    "value": canon_text(series.iloc[i])}
            finite = numbers[~bad]
            if finite.size:
                low, high = float(finite.min()), float(finite.max())
                entry["min"] = low if entry["min"] is None else min(entry["min"], low)
                entry["max"] = high if entry["max"] is None else max(entry["max"], high)
        total += len(frame)
    columns = [{"name": n, "type": types.get(n, "empty"), **counts[n]} for n in names]
    return {"path": str(path), **table.table_facts(), "header_guessed": header_row is None
            and table.header_row is not None, "columns": columns, "rows": total,
            "names": names, "head": head}


def _date_range(entry: dict, dates: pd.Series) -> None:
    if dates.empty:
        return
    low, high = dates.min().isoformat(), dates.max().isoformat()
    entry["min"] = low if entry["min"] is None else min(entry["min"], low)
    entry["max"] = high if entry["max"] is None else max(entry["max"], high)


def _padded(text: str, width: int) -> str:
    """`text` padded to `width` terminal columns (CJK characters take two)."""
    shown = sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)
    return text + " " * max(0, width - shown)


def _shown(value) -> str:
    return value if isinstance(value, str) else f"{value:g}"


def table_report_text(report: dict) -> str:
    lines = [f"{report['path']}: {report['format']}, {report['rows']:,} data rows, "
             f"{len(report['columns'])} columns"]
    if report.get("sheets"):
        lines.append("sheets: " + ", ".join(
            f"{s!r}" + (" (shown)" if s == report["sheet"] else "") for s in report["sheets"]))
    if report.get("encoding"):
        comma = ", decimal comma" if report.get("decimal") == "," else ""
        lines.append(f"encoding: {report['encoding']}, delimiter: {report['delimiter']!r}"
                     + comma)
    if report["header_row"] is not None:
        how = "guessed; set it with --header-row" if report["header_guessed"] else "given"
        lines.append(f"header: row {report['header_row']} ({how}), first data row "
                     f"{report['first_data_row']}")
    lines.append(f"  {'column':<24} {'type':<8} {'empty':>8} {'non-numeric':>12}  range / "
                 "first text")
    for c in report["columns"]:
        detail = (f"{_shown(c['min'])} .. {_shown(c['max'])}" if c["min"] is not None else "")
        if c["example"]:
            detail += f"  row {c['example']['row']}: {c['example']['value']!r}"
        lines.append(f"  {_padded(c['name'], 24)} {c['type']:<8} {c['empty']:>8,} "
                     f"{c['non_numeric']:>12,}  {detail}".rstrip())
    if report["head"]:
        lines.append(f"first {len(report['head'])} rows:")
        lines.append("  " + " | ".join(report["names"]))
        lines += ["  " + " | ".join(row) for row in report["head"]]
    return "\n".join(lines)
