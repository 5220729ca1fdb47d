"""The spec laid over the bytes: each header field and each field of a few records
with its offset, raw bytes and decoded value, and the bytes no field describes."""

from dataclasses import asdict

import numpy as np

from packer.errors import UsageProblem
from packer.sources.binary.dump import Dump, python_value, read_bytes
from packer.sources.binary.fields import Field
from packer.sources.binary.spec import BYTE_ORDERS, Layout

SHOWN_BYTES = 16  # raw bytes shown per row; longer fields are cut with "..."
SHOWN_ITEMS = 6  # array elements shown per value


def overlay_report(dump: Dump, first: int = 0, count: int = 3,
                   both_orders: bool = False) -> dict:
    """Rows for the header and records first..first+count-1 (fewer at the end)."""
    if first and first >= dump.count:
        raise UsageProblem(f"--record {first:,}: {dump.path} holds {dump.count:,} whole "
                           f"records (0..{dump.count - 1:,})")
    count = min(count, dump.count - first)
    rows = []
    if dump.size >= dump.spec.header.size:
        rows += _layout_rows(dump, dump.spec.header, 0, 1, None, both_orders)
    if count > 0:
        start = dump.data_offset + first * dump.spec.record.size
        rows += _layout_rows(dump, dump.spec.record, start, count, first, both_orders)
    if count > 0 and first + count == dump.count and dump.trailing:
        rows.append(_trailing_row(dump))
    return {"mode": "overlay", "file": str(dump.path), "size": dump.size,
            "compression": dump.plain.compression if dump.plain else None,
            "spec": dump.spec.source, "byte_order": dump.byte_order, "count": dump.count,
            "first": first, "shown": count, "both_orders": both_orders,
            "rows": rows, "checks": [asdict(c) for c in dump.checks], "ok": dump.ok}


def _layout_rows(dump: Dump, layout: Layout, start: int, count: int, first: int | None,
                 both_orders: bool) -> list[dict]:
    """Rows for `count` consecutive copies of layout (the header, or records) at start."""
    raw = read_bytes(dump.data_path, start, count * layout.size)
    decoded = {order: np.frombuffer(raw, dtype=layout.dtype.newbyteorder(char))
               for order, char in BYTE_ORDERS.items()} if layout.size else {}
    rows = []
    for index in range(count):
        base = index * layout.size
        for field, gap_start, gap_end in _segments(layout):
            offset = base + (field.offset if field else gap_start)
            size = field.size if field else gap_end - gap_start
            row = {"offset": start + offset, "section": layout.key,
                   "record": None if first is None else first + index,
                   "field": field.name if field else None,
                   "kind": field.kind if field else "gap", "size": size,
                   "bytes": raw[offset:offset + size].hex(" ")}
            if field and field.kind != "pad":
                _add_values(row, field, decoded, index, dump.byte_order, both_orders)
            rows.append(row)
    return rows


def _segments(layout: Layout):
    """(field, None, None) for each field and (None, start, end) for each gap, in order."""
    position = 0
    for field in layout.fields:
        if field.offset > position:
            yield None, position, field.offset
        yield field, None, None
        position = max(position, field.end)
    if layout.size > position:
        yield None, position, layout.size


def _add_values(row: dict, field: Field, decoded: dict, index: int, byte_order: str,
                both_orders: bool) -> None:
    values = {order: python_value(field, arrays[index][field.name])
              for order, arrays in decoded.items()}
    row["value"] = json_value(values[byte_order])
    if both_orders and field.element.itemsize > 1:
        row["little"], row["big"] = json_value(values["little"]), json_value(values["big"])
    if field.expect is not None:
        row["expected"] = field.expect.hex(" ")
        row["ok"] = row["bytes"] == row["expected"]


def _trailing_row(dump: Dump) -> dict:
    offset = dump.size - dump.trailing
    raw = read_bytes(dump.data_path, offset, min(dump.trailing, 4096))
    return {"offset": offset, "section": "trailing", "record": None, "field": None,
            "kind": "trailing", "size": dump.trailing, "bytes": raw.hex(" ")}


def json_value(value):
    """Decoded values for JSON: bytes as text, with Python escapes for other bytes."""
    return repr(value)[2:-1] if isinstance(value, bytes) else value


def value_text(value) -> str:
    """A decoded value in a few characters: floats to 7 digits, long arrays cut."""
    if isinstance(value, list):
        flat = np.asarray(value).ravel()
        items = " ".join(value_text(v.item()) for v in flat[:SHOWN_ITEMS])
        if flat.size <= SHOWN_ITEMS and np.ndim(value) == 1:
            return f"[{items}]"
        return f"[{items}{' ...' if flat.size > SHOWN_ITEMS else ''}] " \
               f"(shape {'x'.join(map(str, np.shape(value)))})"
    if isinstance(value, float):
        return f"{value:.7g}"
    return repr(value) if isinstance(value, str) else str(value)
