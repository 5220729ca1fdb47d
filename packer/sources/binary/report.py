"""`packer inspect-binary`: a report as a dict (for --json) and its text view.

Three views: the plain hex view with hints (no spec), the spec summary (header
values, record count, per-field statistics, every check), and the spec laid over
the bytes (`--spec --hex`).
"""

from dataclasses import asdict
from pathlib import Path

import click

from packer.compressed import PlainFile
from packer.errors import UsageProblem
from packer.sources.binary.dump import Dump, dump_size, examine_dump, plain_size
from packer.sources.binary.hexview import hex_report, render_hex_report
from packer.sources.binary.overlay import SHOWN_BYTES, json_value, overlay_report, value_text
from packer.sources.binary.spec import load_spec

DEFAULT_LENGTH = 256
DEFAULT_RECORDS = 3
SHOWN_HEX = SHOWN_BYTES * 3 - 1  # "xx " per byte, without the last space
FIELD_COLOURS = ("cyan", "yellow", "green", "magenta", "blue", "bright_red")
LEGEND = ("legend: [..] holds one field's bytes (the first 16 of longer ones); "
          "(padding) is padding in the spec; (not in spec) is bytes no field describes")


def binary_report(path: str | Path, spec: str | Path | None = None, *,
                        hex_view: bool = False, offset: int | None = None,
                        length: int | None = None, records: int | None = None,
                        record: int | None = None, both_orders: bool = False,
                        tail: str | None = None) -> dict:
    """The report for one file; "ok" is False when a check against the spec failed."""
    path = Path(path)
    record_options = records is not None or record is not None or both_orders
    if spec is None:
        if record_options or tail:
            raise UsageProblem("--records, --record, --both-orders and --tail need --spec")
        return _plain_hex_report(path, offset or 0, DEFAULT_LENGTH if length is None else length)
    if offset is not None or length is not None:
        raise UsageProblem("--offset and --length are for the hex view without --spec; "
                           "with --spec, use --record N to jump to a record")
    spec_obj = load_spec(spec)
    dump = examine_dump(path, spec_obj, tail)
    if hex_view:
        return overlay_report(dump, record or 0, DEFAULT_RECORDS if records is None else records,
                              both_orders)
    if record_options:
        raise UsageProblem("--records, --record and --both-orders show records over their "
                           "bytes; add --hex")
    return spec_report(dump)


def _plain_hex_report(path: Path, offset: int, length: int) -> dict:
    dump_size(path)
    plain = PlainFile(path)  # a compressed file shows its contents, as a spec reads them
    size = plain_size(path, plain)
    if offset >= size:
        raise UsageProblem(f"--offset {offset:,}: {path}{plain.note} has only {size:,} bytes")
    return {**hex_report(plain.path, size, offset, length), "file": str(path),
            "compression": plain.compression}


def spec_report(dump: Dump) -> dict:
    spec = dump.spec
    stats = dump.field_stats() if dump.count else {}
    fields = [{"name": f.name, "type": f.type, "shape": list(f.spec_shape), "offset": f.offset,
               **stats.get(f.name, {})} for f in spec.record.fields if f.kind != "pad"]
    return {"mode": "spec", "file": str(dump.path), "size": dump.size, "spec": spec.source,
            "compression": dump.plain.compression if dump.plain else None,
            "description": spec.description, "byte_order": dump.byte_order,
            "header_size": spec.header.size, "record_size": spec.record.size,
            "header": {k: json_value(v) for k, v in dump.header.items()},
            "count": dump.count, "trailing": dump.trailing,
            "checks": [asdict(c) for c in dump.checks], "fields": fields, "ok": dump.ok}


def binary_report_text(report: dict, color: bool = False) -> str:
    """The text view; color adds ANSI colours (only for a terminal)."""
    if report["mode"] == "hex":
        return render_hex_report(report)
    if report["mode"] == "overlay":
        return _render_overlay(report, color)
    return _render_spec(report, color)


def _render_spec(report: dict, color: bool) -> str:
    description = f" ({report['description']})" if report["description"] else ""
    compressed = f" ({report['compression']}, decompressed)" if report["compression"] else ""
    lines = [f"{report['file']}: {report['size']:,} bytes{compressed}; spec {report['spec']}"
             f"{description}",
             f"byte order: {report['byte_order']}-endian; header {report['header_size']:,} "
             f"bytes; records of {report['record_size']:,} bytes"]
    if report["header"]:
        width = max(map(len, report["header"]))
        lines.append("header:")
        lines += [f"  {name:<{width}}  {value_text(value)}"
                  for name, value in report["header"].items()]
    lines.append(f"records: {report['count']:,}; trailing bytes: {report['trailing']:,}")
    lines += _render_checks(report["checks"], color)
    if report["count"]:
        lines.append(f"fields over {report['count']:,} records (every element of a shaped "
                     f"field):")
        lines += _stats_table(report["fields"])
    return "\n".join(lines)


def _stats_table(fields: list[dict]) -> list[str]:
    rows = [("field", "type", "offset", "min", "max", "mean")]
    for f in fields:
        kind = f["type"] + ("[" + ",".join(map(str, f["shape"])) + "]" if f["shape"] else "")
        if "min" not in f:  # bytes fields have no statistics
            rows.append((f["name"], kind, str(f["offset"]), "-", "-", "-"))
            continue
        numbers = [value_text(f[k]) if f[k] is not None else "-" for k in ("min", "max", "mean")]
        if f["non_finite"]:
            numbers[2] += f" ({f['non_finite']:,} NaN/inf left out)"
        rows.append((f["name"], kind, str(f["offset"]), *numbers))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)).rstrip()
            for row in rows]


def _render_checks(checks: list[dict], color: bool) -> list[str]:
    lines = ["checks:"]
    for check in checks:
        mark = "ok  " if check["ok"] else "FAIL"
        if color:
            mark = (click.style(mark, fg="green") if check["ok"]
                    else click.style(mark, fg="red", bold=True))
        lines.append(f"  {mark}  {check['name']}: {check['message']}")
    return lines


def _render_overlay(report: dict, color: bool) -> str:
    shown = report["shown"]
    span = (f"records {report['first']:,}..{report['first'] + shown - 1:,} of "
            f"{report['count']:,}" if shown else f"no records shown ({report['count']:,} whole)")
    compressed = f" ({report['compression']}, decompressed)" if report["compression"] else ""
    lines = [f"{report['file']}: {report['size']:,} bytes{compressed}; spec {report['spec']} "
             f"({report['byte_order']}-endian); {span}"]
    if not color:
        lines.append(LEGEND)
    rows = report["rows"]
    names = [_row_name(row) for row in rows]
    raws = [_raw_cell(row, color) for row in rows]
    name_width = max(map(len, names), default=0)
    raw_width = max(map(len, raws), default=0)
    valued = dict.fromkeys(row["field"] for row in rows if "value" in row)
    colours = {field: FIELD_COLOURS[i % len(FIELD_COLOURS)] for i, field in enumerate(valued)}
    for row, name, raw in zip(rows, names, raws, strict=True):
        lines.append(_overlay_line(row, name.ljust(name_width), raw.ljust(raw_width),
                                   colours.get(row["field"]), report["both_orders"], color))
    lines += _render_checks(report["checks"], color)
    return "\n".join(lines)


def _row_name(row: dict) -> str:
    where = row["section"] if row["record"] is None else f"record {row['record']:,}"
    label = {"pad": "(padding)", "gap": "(not in spec)", "trailing": f"({row['size']:,} bytes)"}
    return f"{where} {label.get(row['kind'], row['field'])}"


def _raw_cell(row: dict, color: bool) -> str:
    raw = row["bytes"][:SHOWN_HEX] + (" ..." if row["size"] > SHOWN_BYTES else "")
    return raw if color else f"[{raw}]"


def _overlay_line(row: dict, name: str, raw: str, colour: str | None, both_orders: bool,
                  color: bool) -> str:
    if color:  # styled after padding, so escape codes do not upset the column widths
        style = {"fg": colour} if colour else {"dim": True}
        name, raw = click.style(name, **style), click.style(raw, **style)
    line = f"  0x{row['offset']:08x}  {name}  {raw}"
    if "value" in row:
        line += f"  {_value_cell(row, both_orders)}"
    if row.get("ok") is False:
        problem = f"  expected {row['expected']}"
        line += click.style(problem, fg="red", bold=True) if color else problem
    return line.rstrip()


def _value_cell(row: dict, both_orders: bool) -> str:
    if both_orders and "little" in row:
        return f"little {value_text(row['little'])} | big {value_text(row['big'])}"
    return value_text(row["value"])

