"""The `inspect-table` command, and the table lines of `pack`'s summary."""

import json
from pathlib import Path

import click


@click.command("inspect-table")
@click.argument("path", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option("--sheet", metavar="NAME", help="Excel: the sheet to show (default: the first).")
@click.option("--header-row", type=click.IntRange(min=1), metavar="N",
              help="The row (1-based) holding the column names (default: guessed).")
@click.option("--skip-rows", type=click.IntRange(min=0), default=0, show_default=True,
              help="Rows to skip after the header.")
@click.option("--delimiter", metavar="CHAR", help="CSV: the delimiter (default: detected).")
@click.option("--encoding", metavar="NAME", help="CSV: the encoding (default: detected).")
@click.option("--decimal", type=click.Choice([".", ","]),
              help="CSV: the decimal mark (default: detected).")
@click.option("--rows", type=click.IntRange(min=0), default=5, show_default=True,
              help="First data rows to show.")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def inspect_table(path, sheet, header_row, skip_rows, delimiter, encoding, decimal, rows,
                  as_json):
    """Show a table as `packer pack` would read it: sheets, the header row, each column's
    inferred type, empty and non-numeric counts, and the first rows.

    \b
    Example:
      packer inspect-table ./export.xlsx
      packer inspect-table ./export.xlsx --sheet Results --header-row 3 --json
      packer inspect-table ./data.csv --encoding gbk
    """
    from packer.tables.inspect import inspect_table as run_inspect
    from packer.tables.inspect import inspect_text

    report = run_inspect(path, sheet=sheet, header_row=header_row, skip_rows=skip_rows,
                         delimiter=delimiter, encoding=encoding, decimal=decimal, rows=rows)
    click.echo(json.dumps(report, indent=1, ensure_ascii=False) if as_json
               else inspect_text(report))


def _rows(count: int) -> str:
    return f"{count:,} row" + ("" if count == 1 else "s")


def table_text(manifest: dict) -> str:
    """What was taken from a table: features, labels, columns left out, rows with gaps."""
    table, source = manifest["table"], manifest["source"]
    names = table["features"]
    lines = [f"read and checked {source['rows']:,} rows in {source['scan_seconds']:.1f} s "
             "(before the time above)",
             f"features: {len(names)} column{'' if len(names) == 1 else 's'}: "
             f"{', '.join(names[:10])}"
             + (" ..." if len(names) > 10 else "")]
    if manifest.get("classes"):
        lines.append(f"label {source['label_columns'][0]!r}: {len(manifest['classes'])} "
                     "classes (names in id order in the manifest)")
    elif table.get("targets"):
        lines.append(f"target: {', '.join(table['targets'])}")
    if table["left_out"]:
        lines.append("not features: " + "; ".join(f"{n!r} ({why})"
                                                  for n, why in table["left_out"].items()))
    if source.get("decimal") == ",":
        lines.append("numbers read with a decimal comma (1,5 is 1.5)"
                     + (", as detected; --decimal . reads them otherwise"
                        if source.get("decimal_guessed") else ""))
    for name, origin in table.get("date_origins", {}).items():
        lines.append(f"date {name!r}: seconds since {origin}")
    dates = set(table.get("date_columns") or [])
    for name, lost in table.get("float32_inexact", {}).items():
        if name in dates:
            lines.append(f"date {name!r}: {lost['values']:,} times are off by up to "
                         f"{lost['largest_change']:g} s in float32, which counts whole "
                         "seconds exactly only within 194 days of the first date")
            continue
        lines.append(f"column {name!r}: {lost['values']:,} whole numbers are not exact in "
                     f"float32 (changed by up to {lost['largest_change']:g}); float32 holds "
                     "whole numbers exactly up to 16,777,216: drop the column or use it as "
                     "--key-column if it is an id")
    na = table["na"]
    if na["rows"]:
        done = {"drop": "dropped", "zero": "filled with 0", "mean": "filled with the mean"}
        lines.append(f"{_rows(na['rows'])} had empty or non-numeric feature cells: "
                     f"{done[na['policy']]} (--na {na['policy']})")
    if na.get("unlabelled_rows"):
        lines.append(f"another {_rows(na['unlabelled_rows'])} had no usable label: dropped "
                     "(--na drop)")
    return "\n".join(lines)
