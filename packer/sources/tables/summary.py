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
