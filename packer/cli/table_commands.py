"""`packer inspect-table`: a table as `packer pack` would read it."""

import json
from pathlib import Path

import click

from packer.sources.tables.options import READING, click_options


@click.command("inspect-table")
@click.argument("path", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click_options(*READING)
@click.option("--rows", type=click.IntRange(min=0), default=5, show_default=True,
              help="First data rows to show.")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def inspect_table(path, sheet, header_row, skip_rows, delimiter, decimal, encoding, rows,
                  as_json):
    """Show a table as `packer pack` would read it: sheets, the header row, each column's
    inferred type, empty and non-numeric counts, and the first rows.

    \b
    Example:
      packer inspect-table ./export.xlsx
      packer inspect-table ./export.xlsx --sheet Results --header-row 3 --json
      packer inspect-table ./data.csv --encoding gbk
    """
    from packer.sources.tables.report import table_report, table_report_text

    report = table_report(path, sheet=sheet, header_row=header_row, skip_rows=skip_rows,
                         delimiter=delimiter, encoding=encoding, decimal=decimal, rows=rows)
    click.echo(json.dumps(report, indent=1, ensure_ascii=False) if as_json
               else table_report_text(report))
