"""The records check of a dump: whether its header count (or its size) and the file
agree, and how many whole records to read.

A count that is off the file's whole records by more than CONTRADICTS times is no
count: read in the other byte order it may fit (the spec's byte_order is wrong), or
the header does not describe this file. Neither is packed, whatever `--tail` says;
`--tail drop` is for a dump cut short or followed by other bytes.
"""

from dataclasses import dataclass

import numpy as np

from packer.sources.binary.fields import Field
from packer.sources.binary.spec import Spec


@dataclass(frozen=True)
class Check:
    name: str  # "header.magic", "records", ...
    ok: bool
    message: str


CONTRADICTS = 10  # a header count this many times off the file's whole records is no count


def count_check(size: int, header: dict, spec: Spec, drop: bool, tail,
                 raw_header: bytes = b"") -> tuple[Check, int]:
    """The records check and the number of whole records to read."""
    header_size, record_size = spec.header.size, spec.record.size
    whole, cut = divmod(size - header_size, record_size)
    layout = f"{size:,} bytes = {header_size:,} header + {whole:,} records of {record_size:,}"
    why_dropped = "--tail drop" if tail == "drop" else f"trailing = \"ignore\" in {spec.source}"
    if spec.count_from == "file_size":
        if not cut:
            return Check("records", True, layout), whole
        layout += f" + {cut:,} trailing bytes"
        if drop:
            return Check("records", True, f"{layout}, left out ({why_dropped})"), whole
        return Check("records", False, f"{layout}; {_cut_record(spec, whole, cut)}; pass "
                                       f"--tail drop to pack the {whole:,} whole records"), whole
    declared, problem = _declared_count(header, spec)
    swapped = _swapped_count(raw_header, spec, whole, None if problem else declared)
    if swapped is not None:
        return _byte_order_check(spec, layout, header[spec.count_field], swapped), 0
    if problem:
        return Check("records", False, problem), 0
    if _contradicts(declared, whole):
        return _contradiction_check(spec, layout, declared, whole), 0
    if declared > whole:  # records missing: only --tail drop packs the rest, not trailing
        return _short_check(spec, layout, declared, whole, cut, tail == "drop", "--tail drop")
    return _extra_check(spec, size, declared, drop, why_dropped)


def _cut_record(spec: Spec, whole: int, cut: int) -> str:
    start = spec.header.size + whole * spec.record.size
    return (f"record {whole:,} starts at offset {start:,} and is cut after {cut:,} of its "
            f"{spec.record.size:,} bytes")


def _count_field(spec: Spec) -> Field:
    return next(f for f in spec.header.fields if f.name == spec.count_field)


def _in_records(value: int, spec: Spec) -> int | None:
    if spec.count_unit == "records":
        return value
    records, rest = divmod(value, spec.record.size)
    return None if rest else records


def _contradicts(declared: int, whole: int) -> bool:
    """A count that is off the records the file holds by an order of magnitude."""
    return declared > CONTRADICTS * max(whole, 1) or whole > CONTRADICTS * max(declared, 1)


def _swapped_count(raw_header: bytes, spec: Spec, whole: int,
                   declared: int | None) -> int | None:
    """The header count read in the other byte order, where that fits the file and the
    count as read (None: unusable) does not."""
    field = _count_field(spec)
    raw = raw_header[field.offset:field.end]
    if field.element.itemsize < 2 or len(raw) != field.size:
        return None
    if declared is not None and not _contradicts(declared, whole):
        return None
    value = int(np.frombuffer(raw, dtype=field.element.newbyteorder("S"))[0])
    swapped = _in_records(value, spec) if value >= 0 else None
    if swapped is None or not 0 < swapped <= whole:
        return None
    # Fits: the swapped count accounts for the file, up to less than one record per 1,000.
    return swapped if whole - swapped <= whole // 1000 else None


def _byte_order_check(spec: Spec, layout: str, declared: int, swapped: int) -> Check:
    field = _count_field(spec)
    other = "big" if spec.byte_order == "little" else "little"
    unit = "bytes" if spec.count_unit == "bytes" else "records"
    return Check("records", False,
                 f"header.{field.name} (offset {field.offset}, {field.type}) reads "
                 f"{declared:,} {unit}, but {layout}; read {other}-endian it is "
                 f"{swapped:,}, which fits the file: the byte order looks wrong. The spec says "
                 f"byte_order = \"{spec.byte_order}\" ({spec.source}); if the logger writes "
                 f"{other}-endian, set byte_order = \"{other}\" there")


def _contradiction_check(spec: Spec, layout: str, declared: int, whole: int) -> Check:
    field = _count_field(spec)
    return Check("records", False,
                 f"header.{field.name} (offset {field.offset}, {field.type}) says {declared:,} "
                 f"records, but {layout}: the count is off by more than {CONTRADICTS}x, so "
                 f"the header does not describe this file (another layout, another byte "
                 f"order, or another field holds the count); check the spec {spec.source} "
                 f"with `packer inspect-binary FILE --spec SPEC --hex --both-orders`. If the "
                 f"count is known to be wrong, set count = {{from = \"file_size\"}} there")


def _short_check(spec: Spec, layout: str, declared: int, whole: int, cut: int, drop: bool,
                 why_dropped: str) -> tuple[Check, int]:
    said = f"header.{spec.count_field} says {declared:,} records"
    holds = f"{said}, but {layout}" + (f" + {cut:,} bytes; {_cut_record(spec, whole, cut)}"
                                       if cut else "")
    if drop:
        return Check("records", True, f"{holds}; reading the {whole:,} whole records "
                                      f"({why_dropped})"), whole
    return Check("records", False, f"{holds}; the dump is cut short or the count is "
                                   f"wrong; pass --tail drop to pack the {whole:,} "
                                   f"whole records"), whole


def _extra_check(spec: Spec, size: int, declared: int, drop: bool,
                 why_dropped: str) -> tuple[Check, int]:
    header_size, record_size = spec.header.size, spec.record.size
    extra = size - header_size - declared * record_size
    layout = (f"{size:,} bytes = {header_size:,} header + {declared:,} records of "
              f"{record_size:,} (header.{spec.count_field})")
    if not extra:
        return Check("records", True, layout), declared
    layout += f" + {extra:,} trailing bytes"
    if drop:
        return Check("records", True, f"{layout}, left out ({why_dropped})"), declared
    more, cut = divmod(extra, record_size)
    if more:  # whole records beyond the count
        layout += (f", {more:,} whole record{'s' if more > 1 else ''}"
                   f"{f' and {cut:,} bytes' if cut else ''} more than "
                   f"header.{spec.count_field} says: the header count disagrees with the "
                   f"file size, or other data follows the records")
    else:
        layout += (f", less than a record: record {declared:,} would start at offset "
                   f"{header_size + declared * record_size:,} and is cut after {cut:,} of its "
                   f"{record_size:,} bytes, or these are bytes after the records")
    return Check("records", False, f"{layout}; pass --tail drop to pack the {declared:,} "
                                   f"records and leave the rest out, or set trailing = "
                                   f"\"ignore\" in {spec.source} if bytes after the records "
                                   f"are expected"), declared


def _declared_count(header: dict, spec: Spec) -> tuple[int, str | None]:
    """The header's record count, or a message saying why it is unusable."""
    value, record_size = header[spec.count_field], spec.record.size
    where = f"header.{spec.count_field} = {value:,}"
    if value < 0:
        return 0, f"{where} is negative; it cannot be a count"
    if spec.count_unit == "records":
        return value, None
    records, rest = divmod(value, record_size)
    if rest:
        return 0, (f"{where} bytes is not a whole number of {record_size}-byte records "
                   f"({records:,} records + {rest} bytes); check the spec's record fields")
    return records, None
