"""The options of a pack, and which of them apply to which kind of source and format.

One table, built from what each source kind (packer/sources/*) and format
(packer/formats/*) declares, is checked before packing, so that an option the source
would ignore is refused instead of passing silently. No click here: the CLI says
which options were given, this module decides.
"""

from dataclasses import asdict, dataclass
from pathlib import Path

from packer.errors import UsageProblem
from packer.formats import DEFAULT_FORMAT, format_module, registered
from packer.packing.transform import Transform
from packer.sources import all_kinds, claim, kind_info, source_options
from packer.sources.base import Applies
from packer.storage.url import is_s3


@dataclass
class PackOptions:
    to: str = DEFAULT_FORMAT
    labels: Path | None = None
    unlabelled: bool = False
    group_by_stem: bool = False
    follow_symlinks: bool = True
    on_error: str = "skip"
    check: str = "header"
    workers: int = 1
    engine: str = "local"  # or "ray": packer/packing/ray_engine.py
    address: str | None = None  # the Ray cluster's, as ray.init takes it
    shard_size: int = 256 << 20
    max_count: int | None = None
    resume: bool = False
    overwrite: bool = False
    progress: bool = True
    spec: str | None = None
    window: int | None = None
    stride: int | None = None
    tail: str | None = None
    label_field: str | None = None
    label_spec: str | None = None
    sheet: str | None = None  # tables (packer/sources/tables, docs/tables.md)
    header_row: int | None = None
    skip_rows: int = 0
    delimiter: str | None = None
    decimal: str | None = None
    encoding: str | None = None
    label_column: tuple = ()
    feature_columns: tuple = ()
    drop_columns: tuple = ()
    key_column: str | None = None
    na: str = "fail"
    categorical: tuple = ()
    date_columns: tuple = ()
    task: str = "classify"
    resize: str | None = None  # the pack-time transform (packer/packing/transform.py)
    resize_mode: str = "crop"
    encode: str = "keep"
    split: str | None = None  # splits made at pack time (packer/packing/splits.py)
    split_by: str | None = None
    split_seed: int = 0
    dedupe: bool = False

    def transform(self) -> Transform | None:
        """The transform of every image, or None when the files are stored as they are."""
        transform = Transform(self.resize, self.resize_mode, self.encode)
        return transform if transform.active else None

    def recorded(self) -> dict:
        """The options that shape the output, as the manifest records them (the
        transform's only when there is one: a pack without it records what it did
        before the transform existed)."""
        kept = asdict(self)
        dropped = ["workers", "engine", "address", "resume", "overwrite", "progress"]
        for name in dropped + ([*TRANSFORM_OPTIONS] if self.transform() is None else []):
            kept.pop(name)
        kept["labels"] = str(self.labels.resolve()) if self.labels else None
        return kept

    def shaping(self) -> dict:
        """The recorded options, less the part bounds that the --to format does not
        read: what a resumed run must match."""
        ignored = PART_OPTIONS - format_module(self.to).PACK_OPTIONS
        return {name: value for name, value in self.recorded().items() if name not in ignored}


def found_labels(source: Path, labels: Path | None) -> Path | None:
    """`--labels` as given when that names a file (from the current folder), else the
    file of that name in SOURCE (beside SOURCE, when it is a file)."""
    if labels is None or Path(labels).is_file():
        return labels and Path(labels)
    if is_s3(source):
        raise UsageProblem(f"--labels {labels}: no such file in the current folder "
                           f"({Path.cwd()}); with an s3:// SOURCE, --labels is a local file "
                           "(a labels.csv at the top of the prefix is used without --labels)")
    folder = Path(source) if Path(source).is_dir() else Path(source).parent
    if not Path(labels).is_absolute() and (folder / labels).is_file():
        return folder / labels
    where = "" if Path(labels).is_absolute() else (f" in the current folder ({Path.cwd()}) "
                                                   f"or in {folder}")
    raise UsageProblem(f"--labels {labels}: no such file{where}")


# Options of every pack, whatever the source and the format.
EVERY_PACK = frozenset({"to", "out", "workers", "engine", "address", "resume", "overwrite",
                        "spec", "as_json", "quiet", "split", "split_seed", "dedupe",
                        "append_to", "on_duplicate"})
# Bounds of a part, which a format reads or not (its PACK_OPTIONS): given to a format that
# does not read them, they are a warning, as scripts pass the same bounds to every format.
PART_OPTIONS = frozenset({"shard_size", "max_count"})
TRANSFORM_OPTIONS = ("resize", "resize_mode", "encode")
_APPLIES = {**source_options(), **{name: Applies(frozenset(all_kinds())) for name in PART_OPTIONS}}
PACK_OPTIONS: dict[str, Applies] = {  # in the order of PackOptions, as `--help` lists them
    name: _APPLIES[name] for name in PackOptions.__dataclass_fields__ if name in _APPLIES}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _kinds_text(kinds: frozenset) -> str:
    """`CSV/TSV tables and folders with or without --spec`: a group of kinds by its
    name where all of it is meant."""
    every = all_kinds()
    groups = dict.fromkeys(info.group for info in every.values() if info.group)
    named = [group for group in groups
             if {k for k, info in every.items() if info.group == group} <= kinds]
    left = [k for k in every if k in kinds and every[k].group not in named]
    names = [every[k].plural for k in left] + named
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def formats_reading(name: str) -> list[str]:
    """The formats that read the part option `name` (its PACK_OPTIONS)."""
    return [f for f in registered() if name in format_module(f).PACK_OPTIONS]


def inapplicable_options(kind: str, to: str, given: set[str]) -> tuple[dict, dict]:
    """The given options that `kind` does not read, and those only `to` does not read,
    each with where it applies: ({name: why}, {name: why})."""
    by_kind, by_format = {}, {}
    format_reads = format_module(to).PACK_OPTIONS
    for name, applies in PACK_OPTIONS.items():
        if name not in given:
            continue
        if kind not in applies.kinds:
            by_kind[name] = f"only for {_kinds_text(applies.kinds)}"
        elif applies.needs.get(kind) and applies.needs[kind] not in given:
            by_kind[name] = f"only with {_flag(applies.needs[kind])}"
        elif name in PART_OPTIONS and name not in format_reads:
            by_format[name] = "only for " + " or ".join(f"--to {f}" for f in formats_reading(name))
    return by_kind, by_format


def _grouped(reasons: dict) -> str:
    """`--a, --b (only for tables); --c (only for Excel workbooks)`."""
    groups: dict[str, list[str]] = {}
    for name, why in reasons.items():
        groups.setdefault(why, []).append(_flag(name))
    return "; ".join(f"{', '.join(names)} ({why})" for why, names in groups.items())


def check_pack_options(source: Path, options: dict, given: set[str]) -> str | None:
    """Refuse `given` options (those set on the command line) that this source would
    ignore; return the warning about those only the --to format ignores, if any."""
    _check_engine(options, given)
    _check_resize_mode(options, given)
    found = claim(source, options.get("spec"))
    if found is None:  # packing says why
        return None
    _, kind = found
    by_kind, by_format = inapplicable_options(kind, options["to"], given)
    if by_kind:
        raise UsageProblem(f"these options do not apply to {source}, taken for "
                           f"{kind_info(kind).taken_for}: "
                           f"{_grouped({**by_kind, **by_format})}. Leave them out.")
    if by_format:
        return f"Warning: --to {options['to']} ignores {_grouped(by_format)}."
    return None


def _check_resize_mode(options: dict, given: set[str]) -> None:
    """--resize-mode says how an image is made an exact WxH; other rules keep its aspect."""
    resize = options.get("resize")
    if "resize_mode" in given and resize and Transform(resize).exact_size() is None:
        raise UsageProblem(f"--resize-mode {options['resize_mode']} applies only to an exact "
                           f"--resize WxH (e.g. 64x64); --resize {resize} keeps each image's "
                           "aspect ratio. Leave out --resize-mode, or give WxH.")


def _check_engine(options: dict, given: set[str]) -> None:
    """--workers is the local engine's, --address the Ray engine's."""
    engine = options.get("engine", "local")
    if engine == "ray" and "workers" in given:
        raise UsageProblem("--workers is for --engine local; with --engine ray every CPU of "
                           "the cluster runs a task (a local instance: every CPU of this "
                           "machine). Leave out --workers.")
    if engine != "ray" and "address" in given:
        raise UsageProblem("--address is the Ray cluster's: pass --engine ray with it, or "
                           "leave it out")
