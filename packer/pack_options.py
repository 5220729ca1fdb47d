"""Which `packer pack` options apply to which kind of source and which format: one
table, checked before packing, so that an option the source would ignore is refused
instead of passing silently."""

from pathlib import Path
from typing import NamedTuple

import click
from click.core import ParameterSource

from packer.errors import UsageProblem
from packer.formats import FORMAT_NAMES

# SOURCE is taken for one kind of source, as packer.sources.open_source opens it.
FOLDER, CSV, EXCEL, PARQUET = "folder", "csv", "excel", "parquet"
DUMP, BINARY_FOLDER = "binary-dump", "binary-folder"
SOURCE_KINDS = {  # kind: (what SOURCE was taken for, the kind in a list of kinds)
    FOLDER: ("a folder of files", "folders of files without --spec"),
    CSV: ("a text table (CSV, TSV or .txt)", "CSV/TSV tables"),
    EXCEL: ("an Excel workbook", "Excel workbooks"),
    PARQUET: ("a Parquet table", "Parquet tables"),
    DUMP: ("a binary dump (a file with --spec)", "binary dumps with --spec"),
    BINARY_FOLDER: ("a folder of binary files (a folder with --spec)",
                    "folders of binary files with --spec"),
}
TABLES = frozenset({CSV, EXCEL, PARQUET})
FOLDERS = frozenset({FOLDER, BINARY_FOLDER})
EVERY_KIND = frozenset(SOURCE_KINDS)


class Applies(NamedTuple):
    kinds: frozenset  # the kinds of source that read the option
    formats: tuple = FORMAT_NAMES  # the --to formats that read it
    needs: dict = {}  # kind: another option without which this one is not read


# What the code reads, option by option (packer/sources/*, packer/packing.py); those
# in EVERY_PACK apply to every pack. A given option that a source kind does not read
# is refused; one that only the --to format does not read (--shard-size and
# --max-count bound tar shards; LMDB and HDF5 parts have fixed bounds) is refused
# along with them, and alone is a warning: scripts pass the same bounds to every format.
EVERY_PACK = frozenset({"to", "out", "workers", "resume", "overwrite", "spec", "as_json",
                        "quiet"})
PACK_OPTIONS = {
    "labels": Applies(FOLDERS | {DUMP}),
    "unlabelled": Applies(FOLDERS),
    "group_by_stem": Applies(frozenset({FOLDER})),
    "follow_symlinks": Applies(FOLDERS),
    "check": Applies(frozenset({FOLDER})),  # binary files are checked against the spec
    "on_error": Applies(FOLDERS),  # only files are ever skipped
    "shard_size": Applies(EVERY_KIND, formats=("webdataset", "tfrecord")),
    "max_count": Applies(EVERY_KIND, formats=("webdataset", "tfrecord")),
    "window": Applies(frozenset({DUMP})),
    "stride": Applies(frozenset({DUMP}), needs={DUMP: "window"}),
    "tail": Applies(frozenset({DUMP, BINARY_FOLDER})),
    "label_field": Applies(frozenset({DUMP})),
    "label_spec": Applies(frozenset({DUMP}), needs={DUMP: "labels"}),
    "label_column": Applies(TABLES),
    "feature_columns": Applies(TABLES),
    "drop_columns": Applies(TABLES),
    "key_column": Applies(TABLES),
    "na": Applies(TABLES),
    "categorical": Applies(TABLES),
    "date_columns": Applies(TABLES),
    "task": Applies(TABLES),
    "sheet": Applies(frozenset({EXCEL})),
    "header_row": Applies(frozenset({CSV, EXCEL})),
    "skip_rows": Applies(frozenset({CSV, EXCEL})),
    "delimiter": Applies(frozenset({CSV})),
    "decimal": Applies(frozenset({CSV})),
    # a text table's encoding, or that of a folder's --labels file
    "encoding": Applies(frozenset({CSV}) | FOLDERS,
                        needs={FOLDER: "labels", BINARY_FOLDER: "labels"}),
}


def source_kind(source: Path, spec: str | None) -> str | None:
    """The kind of source `packer pack` takes SOURCE for; None when it is none (the
    packing says why)."""
    from packer.sources import is_table

    if not source.exists():
        return None
    if spec:
        return BINARY_FOLDER if source.is_dir() else DUMP
    if source.is_dir():
        return FOLDER
    if is_table(source):
        suffix = source.suffix.lower()
        return EXCEL if suffix in (".xlsx", ".xls") else PARQUET if suffix == ".parquet" else CSV
    return None


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _kinds_text(kinds: frozenset) -> str:
    groups = [(group, name) for group, name in ((TABLES, "tables"),
                                                (FOLDERS, "folders with or without --spec"))
              if group <= kinds]
    left = kinds.difference(*(group for group, _ in groups))
    names = [SOURCE_KINDS[k][1] for k in SOURCE_KINDS if k in left] + [n for _, n in groups]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def inapplicable_options(kind: str, to: str, given: set[str]) -> tuple[dict, dict]:
    """The given options that `kind` does not read, and those only `to` does not read,
    each with where it applies: ({name: why}, {name: why})."""
    by_kind, by_format = {}, {}
    for name, applies in PACK_OPTIONS.items():
        if name not in given:
            continue
        if kind not in applies.kinds:
            by_kind[name] = f"only for {_kinds_text(applies.kinds)}"
        elif applies.needs.get(kind) and applies.needs[kind] not in given:
            by_kind[name] = f"only with {_flag(applies.needs[kind])}"
        elif to not in applies.formats:
            by_format[name] = "only for " + " or ".join(f"--to {f}" for f in applies.formats)
    return by_kind, by_format


def _grouped(reasons: dict) -> str:
    """`--a, --b (only for tables); --c (only for Excel workbooks)`."""
    groups: dict[str, list[str]] = {}
    for name, why in reasons.items():
        groups.setdefault(why, []).append(_flag(name))
    return "; ".join(f"{', '.join(names)} ({why})" for why, names in groups.items())


def check_pack_options(ctx: click.Context, source: Path, options: dict) -> None:
    """Refuse options given on the command line that this source would ignore (exit 2);
    warn about those only the --to format ignores."""
    kind = source_kind(source, options.get("spec"))
    if kind is None:
        return
    defaults = (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)
    given = {name for name in options if ctx.get_parameter_source(name) not in defaults}
    by_kind, by_format = inapplicable_options(kind, options["to"], given)
    if by_kind:
        raise UsageProblem(f"these options do not apply to {source}, taken for "
                           f"{SOURCE_KINDS[kind][0]}: {_grouped({**by_kind, **by_format})}. "
                           "Leave them out.")
    if by_format:
        click.echo(f"Warning: --to {options['to']} ignores {_grouped(by_format)}.", err=True)
