"""Spec files: a TOML description of a binary dump, compiled to numpy structured dtypes.

A spec states the byte order, the header (size and the fields worth naming, with
expected values for magics), the record's fields, where the record count comes from
and what bytes after the last record mean. `docs/binary.md` describes the format;
`packer/sources/binary/specs/` holds worked examples, loadable by name (`load_spec("imu")`).
"""

import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from packer.errors import PackerError, UsageProblem
from packer.sources.binary.fields import Field, check_keys, is_int, parse_field
from packer.sources.binary.shipped import shipped_spec_names

BYTE_ORDERS = {"little": "<", "big": ">"}
TRAILING_RULES = ("error", "ignore")
COUNT_UNITS = ("records", "bytes")
_TOP_KEYS = ("description", "byte_order", "header", "record", "count", "trailing", "container",
             "sample")
SAMPLE_UNITS = ("record", "file")  # what one sample of a dump is: a record, or the whole file
CONTAINERS = ("riff", "aiff")  # chunked files, whose layout is read from their chunks


class SpecError(PackerError):
    """A spec file that cannot be read or does not describe a consistent layout."""


@dataclass(frozen=True)
class Layout:
    """The header or the record: a size and its fields in offset order, padding included."""

    key: str  # "header" or "record"
    size: int
    fields: tuple[Field, ...]

    @property
    def dtype(self) -> np.dtype:
        named = [f for f in self.fields if f.kind != "pad"]
        return np.dtype({"names": [f.name for f in named], "formats": [f.dtype for f in named],
                         "offsets": [f.offset for f in named], "itemsize": self.size})


@dataclass(frozen=True)
class Spec:
    source: str  # the spec file, for messages
    byte_order: str  # "little" or "big"
    header: Layout
    record: Layout
    count_from: str  # "header" or "file_size"
    count_field: str | None  # the header field holding the count
    count_unit: str  # what that field counts: "records" or "bytes"
    trailing: str  # bytes after the last record: "error" or "ignore"
    description: str = ""
    container: str | None = None  # "riff" or "aiff": each file's layout is in its chunks
    derived: tuple = ()  # (name, value) pairs a chunk reader decoded (AIFF's sample rate)
    sample: str = "record"  # "file": the spec describes a whole file (a sound, a scan)

    @property
    def field_names(self) -> list[str]:
        """The record's fields that become arrays (a chunked file's: its samples)."""
        if self.container:
            return ["sample"]
        return [f.name for f in self.record.fields if f.kind != "pad"]

    @property
    def record_dtype(self) -> np.dtype:
        return self.record.dtype

    @property
    def header_dtype(self) -> np.dtype:
        return self.header.dtype


def _shipped_specs() -> Path:
    return Path(str(resources.files("packer.sources.binary").joinpath("specs")))


def resolve_spec_path(spec: str | Path) -> Path:
    """A spec file's path, or the path of the shipped spec of that name (`imu`)."""
    path = Path(spec)
    if path.is_dir():
        raise UsageProblem(f"--spec {path}: is a folder; give a spec file (.toml)")
    if path.is_file():
        return path
    if str(spec) in shipped_spec_names():
        return _shipped_specs() / f"{spec}.toml"
    raise UsageProblem(f"--spec {path}: no such file, and not a shipped spec "
                       f"(shipped: {', '.join(shipped_spec_names())})")


def load_spec(spec: str | Path) -> Spec:
    path = resolve_spec_path(spec)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError(f"{path}: cannot read the spec file: {err}") from None
    return parse_spec(text, str(path))


def parse_spec(text: str, source: str = "<spec>") -> Spec:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise SpecError(f"{source}: not valid TOML: {err}; fix the file there") from None
    return spec_from_dict(data, source)


def spec_from_dict(data: dict, source: str = "<spec>") -> Spec:
    def fail(message: str):
        raise SpecError(f"{source}: {message}")

    check_keys(data, _TOP_KEYS, "the top level", fail)
    if "container" in data:
        return _container_spec(data, source, fail)
    byte_order = data.get("byte_order")
    if byte_order not in BYTE_ORDERS:
        fail(f"byte_order = {byte_order!r}: say byte_order = \"little\" or \"big\""
             if "byte_order" in data else "missing key byte_order (\"little\" or \"big\")")
    order = BYTE_ORDERS[byte_order]
    header = _parse_layout(_table(data, "header", fail, default={"size": 0, "fields": {}}),
                           "header", order, fail)
    if "record" not in data:
        fail("missing table [record] with the record's fields")
    record = _parse_layout(_table(data, "record", fail), "record", order, fail)
    count_from, count_field, count_unit = _parse_count(data.get("count"), header, fail)
    trailing = data.get("trailing", "error")
    if trailing not in TRAILING_RULES:
        fail(f"trailing = {trailing!r}: use \"error\" or \"ignore\"")
    sample = data.get("sample", "record")
    if sample not in SAMPLE_UNITS:
        fail(f"sample = {sample!r}: use \"record\" (one sample per record, the default) or "
             "\"file\" (one sample per file: a sound, a scan)")
    return Spec(source, byte_order, header, record, count_from, count_field, count_unit,
                trailing, str(data.get("description", "")), sample=sample)


def _container_spec(data: dict, source: str, fail) -> Spec:
    """A spec for chunked files: the chunk reader (packer/sources/binary/chunks.py) finds each
    file's layout, so nothing but a description goes with it."""
    container = data["container"]
    if container not in CONTAINERS:
        fail(f"container = {container!r}: use one of {', '.join(map(repr, CONTAINERS))}")
    extra = [key for key in data if key not in ("container", "description")]
    if extra:
        fail(f"{extra[0]} with container = {container!r}: the chunks of each file say its "
             "layout, so a container spec takes only description")
    empty = Layout("header", 0, ())
    return Spec(source, "big" if container == "aiff" else "little", empty,
                Layout("record", 0, ()), "file_size", None, "records", "ignore",
                str(data.get("description", "")), container, sample="file")


def _table(data: dict, key: str, fail, default: dict | None = None) -> dict:
    value = data.get(key, default)
    if not isinstance(value, dict):
        fail(f"{key} must be a table, e.g. [{key}] followed by its keys")
    return value


def _parse_layout(table: dict, key: str, order: str, fail) -> Layout:
    check_keys(table, ("size", "fields"), f"[{key}]", fail)
    fields_table = _table(table, "fields", fail, default={})
    if not fields_table and key == "record":
        fail("record.fields is missing or empty; describe at least one field, "
             "e.g. value = {type = \"f4\"}")
    fields, next_offset = [], 0
    for name, field_table in fields_table.items():
        field = parse_field(name, field_table, f"{key}.fields.{name}", order, next_offset, fail)
        if key == "record" and field.expect is not None:
            fail(f"{field.key}: expect is checked in the header only (once per file); a "
                 "record field takes no expected value")
        fields.append(field)
        next_offset = field.end
    fields.sort(key=lambda f: f.offset)
    _check_overlaps(fields, fail)
    end = max((f.end for f in fields), default=0)
    size = _layout_size(table, key, end, fields, fail)
    if key == "record" and all(f.kind == "pad" for f in fields):
        fail("record.fields holds only padding; describe at least one value")
    return Layout(key, size, tuple(fields))


def _layout_size(table: dict, key: str, end: int, fields: list[Field], fail) -> int:
    if "size" not in table:
        if key == "header" and fields:
            fail("missing key header.size (the header's length in bytes)")
        return end
    size = table["size"]
    if not is_int(size) or size < 0:
        fail(f"{key}.size = {size!r}: give a length in bytes (an integer, 0 or more)")
    last = max(fields, key=lambda f: f.end, default=None)
    if last is not None and last.end > size:
        fail(f"{last.key} ends at byte {last.end}, past {key}.size = {size}; "
             f"correct {key}.size or the field")
    if key == "record" and size > end:
        # A record's every byte is described, so a forgotten field shows up here.
        fail(f"record.size = {size} but the fields end at byte {end}: {size - end} bytes of "
             f"each record are not described; add a field such as "
             f"_pad = {{type = \"pad{size - end}\"}} or correct record.size")
    return size


def _check_overlaps(fields: list[Field], fail) -> None:
    reach = None  # the field reaching furthest so far, in offset order
    for field in fields:
        if reach is not None and field.offset < reach.end:
            last = min(field.end, reach.end) - 1
            fail(f"{field.key} overlaps {reach.key} at bytes {field.offset}..{last}")
        if reach is None or field.end > reach.end:
            reach = field


def _parse_count(count, header: Layout, fail) -> tuple[str, str | None, str]:
    example = "count = {from = \"header\", field = \"n_records\"} or count = {from = \"file_size\"}"
    if count is None:
        return "file_size", None, "records"
    if not isinstance(count, dict) or count.get("from") not in ("header", "file_size"):
        fail(f"count = {count!r}: write {example}")
    check_keys(count, ("from", "field", "unit"), "count", fail)
    unit = count.get("unit", "records")
    if unit not in COUNT_UNITS:
        fail(f"count.unit = {unit!r}: use \"records\" or \"bytes\"")
    if count["from"] == "file_size":
        if set(count) != {"from"}:
            fail("count = {from = \"file_size\"} takes no other keys")
        return "file_size", None, unit
    name = count.get("field")
    names = [f.name for f in header.fields if f.kind == "int" and not f.shape]
    if name not in names:
        fail(f"count.field = {name!r} is not an integer field of the header; "
             f"header integer fields: {', '.join(names) or 'none'}")
    return "header", name, unit
