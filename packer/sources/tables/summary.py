"""What a pack took from a table, as the lines of its summary."""


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
    lines += _reading_lines(source)
    if manifest.get("classes"):
        lines.append(_classes_line(source["label_columns"][0], manifest["classes"]))
    elif table.get("targets"):
        lines.append(f"target: {', '.join(table['targets'])}")
    else:
        lines.append(_no_label_line(table))
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


SHOWN_CLASSES = 20


def _reading_lines(source: dict) -> list[str]:
    """How the table was read: the compression, the sheet and the others, the header
    row, the text encoding; each with the option that changes it."""
    lines = []
    if source.get("compression"):
        lines.append(f"read from {source['compression']}-compressed {source['path']}")
    if source.get("sheets"):
        others = [s for s in source["sheets"] if s != source["sheet"]]
        lines.append(f"sheet {source['sheet']!r}" + (
            f"; other sheets: {', '.join(repr(s) for s in others)} (--sheet NAME packs one)"
            if others else " (the only one)"))
    if source.get("header_row") is not None:
        lines.append(f"header: row {source['header_row']}, first data row "
                     f"{source['first_data_row']} (--header-row N takes another)")
    if source.get("encoding"):
        how = ("--encoding" if source.get("encoding_given") else "detected; if names look "
               "garbled, pass --encoding NAME, e.g. --encoding gbk, big5 or cp1252")
        lines.append(f"encoding: {source['encoding']} ({how})")
    return lines


def _classes_line(column: str, classes: list[str]) -> str:
    shown = ", ".join(f"{i} {name}" for i, name in enumerate(classes[:SHOWN_CLASSES]))
    more = f", ... ({len(classes):,} in all, in the manifest)" if len(classes) > SHOWN_CLASSES \
        else ""
    return f"label {column!r}: {len(classes)} classes: {shown}{more}"


def _no_label_line(table: dict) -> str:
    text = [name for name, why in table["left_out"].items() if "--label-column" in why]
    if not text:
        return "no label column (--label-column NAME takes one)"
    return (f"no label column: pass --label-column NAME if one holds the labels (text "
            f"columns: {', '.join(repr(n) for n in text)})")
