"""The options of a pack, and which of them apply to which kind of source and format.

One table, built from what each source kind (packer/sources/*) and format
(packer/formats/*) declares, is checked before packing, so that an option the source
would ignore is refused instead of passing silently. No click here: the CLI says
which options were given, this module decides.
"""

from dataclasses import dataclass, fields, replace
from pathlib import Path

from packer.errors import UsageProblem
from packer.formats import DEFAULT_FORMAT, format_module, registered
from packer.packing.transform import Transform
from packer.sources import all_kinds, claim, kind_info, kind_options, source_kinds, source_options
from packer.sources.base import Applies
from packer.sources.options import KindOptions
from packer.storage.url import is_s3


@dataclass
class PackOptions:
    """What every pack shares, and `source`: the options of the source's kind (a
    FolderOptions, BinaryOptions or TableOptions of packer/sources/*/options.py; None
    gives the defaults of the kind that claims the source)."""

    to: str = DEFAULT_FORMAT
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
    spec: str | None = None  # binary: a spec file, which also chooses the kind
    resize: str | None = None  # the pack-time transform (packer/packing/transform.py)
    resize_mode: str = "crop"
    encode: str = "keep"
    split: str | None = None  # splits made at pack time (packer/packing/splits.py)
    split_by: str | None = None
    split_seed: int = 0
    dedupe: bool = False
    source: KindOptions | None = None

    def transform(self) -> Transform | None:
        """The transform of every image, or None when the files are stored as they are."""
        transform = Transform(self.resize, self.resize_mode, self.encode)
        return transform if transform.active else None

    def recorded(self) -> dict:
        """The options that shape the output, as the manifest records them (the
        transform's only when there is one: a pack without it records what it did
        before the transform existed)."""
        kept = {**every_kind_default(), **{f.name: getattr(self, f.name) for f in fields(self)
                                            if f.name != "source"}}
        kept.update(vars(self.source) if self.source is not None else {})
        dropped = ["workers", "engine", "address", "resume", "overwrite", "progress"]
        for name in dropped + ([*TRANSFORM_OPTIONS] if self.transform() is None else []):
            kept.pop(name)
        kept["labels"] = str(Path(kept["labels"]).resolve()) if kept["labels"] else None
        order = {name: n for n, name in enumerate(RECORDED_ORDER)}
        return dict(sorted(kept.items(), key=lambda item: order.get(item[0], len(order))))

    def shaping(self) -> dict:
        """The recorded options, less the part bounds that the --to format does not
        read: what a resumed run must match."""
        ignored = PART_OPTIONS - format_module(self.to).PACK_OPTIONS
        return {name: value for name, value in self.recorded().items() if name not in ignored}


def every_kind_default() -> dict:
    """Every kind's options at their defaults, flat: a manifest records them all, as one
    set of options, whichever kind packed."""
    merged = {}
    for module in source_kinds():
        merged.update({name: value for name, value in vars(kind_options(module)()).items()
                       if name not in merged})
    return merged


def for_source(path, options: PackOptions) -> PackOptions:
    """`options` with the source options of the kind that claims `path` (its defaults
    where none were given) and --labels found (`found_labels`); as they are when no kind
    claims `path` (packing then says why)."""
    source = options.source
    if source is None:
        found = claim(path, options.spec)
        if found is None:
            return options
        source = kind_options(found[0])()
    if getattr(source, "labels", None) is not None:
        source = replace(source, labels=found_labels(path, source.labels))
    return replace(options, source=source)


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


# The order in which a manifest lists the options, as it has since they were one flat set
# (`packer view` shows them so); an option of a kind added since comes after these.
RECORDED_ORDER = (
    "to", "labels", "unlabelled", "group_by_stem", "follow_symlinks", "on_error", "check",
    "shard_size", "max_count", "spec", "window", "stride", "tail", "label_field", "label_spec",
    "sheet", "header_row", "skip_rows", "delimiter", "decimal", "encoding", "label_column",
    "feature_columns", "drop_columns", "key_column", "na", "categorical", "date_columns", "task",
    "resize", "resize_mode", "encode", "split", "split_by", "split_seed", "dedupe")
# Options of every pack, whatever the source and the format.
EVERY_PACK = frozenset({"to", "out", "workers", "engine", "address", "resume", "overwrite",
                        "spec", "as_json", "quiet", "split", "split_seed", "dedupe",
                        "append_to", "on_duplicate"})
# Bounds of a part, which a format reads or not (its PACK_OPTIONS): given to a format that
# does not read them, they are a warning, as scripts pass the same bounds to every format.
PART_OPTIONS = frozenset({"shard_size", "max_count"})
TRANSFORM_OPTIONS = ("resize", "resize_mode", "encode")


def pack_option_table() -> dict[str, Applies]:
    """Every option that some source kinds or formats do not read, with the kinds that
    read it: the kinds' own options, then the shared ones (asked of the kinds registered
    now)."""
    applies = {**source_options(),
               **{name: Applies(frozenset(all_kinds())) for name in PART_OPTIONS}}
    return {name: applies[name] for name in [*every_kind_default(),
                                             *PackOptions.__dataclass_fields__]
            if name in applies}


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
    for name, applies in pack_option_table().items():
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


def pack_options(source, values: dict, given: set[str], **shared) -> tuple[PackOptions, str | None]:
    """The PackOptions of the command line's flat `values`: the shared ones, and those
    the kind that claims `source` reads. Refuses `given` options (those set on the
    command line) that this source would ignore; the warning about those only the --to
    format ignores comes with them, or None."""
    _check_engine(values, given)
    _check_resize_mode(values, given)
    names = set(PackOptions.__dataclass_fields__)
    options = PackOptions(**{k: v for k, v in values.items() if k in names}, **shared)
    found = claim(source, values.get("spec"))
    if found is None:  # packing says why
        return options, None
    module, kind = found
    by_kind, by_format = inapplicable_options(kind, values["to"], given)
    if by_kind:
        raise UsageProblem(f"these options do not apply to {source}, taken for "
                           f"{kind_info(kind).taken_for}: "
                           f"{_grouped({**by_kind, **by_format})}. Leave them out.")
    options = replace(options, source=kind_options(module).of(values))
    return options, (f"Warning: --to {values['to']} ignores {_grouped(by_format)}."
                     if by_format else None)


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
