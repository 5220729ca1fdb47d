"""The source registry: which source kind a path is, its options, its scan.

Each kind is a package named here (its protocol: packer/sources/base.py); they are
asked in this order, and each package's `__init__` is light, so that asking never
imports numpy or pandas. A new kind is one package and one line below: its options
(a dataclass and its click options, packer/sources/options.py) come with it.
"""

import importlib
from dataclasses import replace
from functools import cache
from pathlib import Path
from types import ModuleType

from packer.errors import UsageProblem
from packer.sources.base import Applies, Kind
from packer.storage.url import is_s3

_KINDS = {
    "files": "packer.sources.files",
    "tables": "packer.sources.tables",
    "binary": "packer.sources.binary",
}


def source_kinds() -> list[ModuleType]:
    return [importlib.import_module(name) for name in _KINDS.values()]


def claim(path: Path, spec: str | None) -> tuple[ModuleType, str] | None:
    """The source kind that takes `path` (with `--spec spec`; an s3:// URL as it is
    written), and which of its kinds the path is; None when the path is missing or no
    kind takes it."""
    if is_s3(path):
        from packer.storage.fetch import names_object

        one_object = names_object(path)
        return next(((module, kind) for module in source_kinds()
                     if (kind := module.claims_url(path, spec, one_object)) is not None), None)
    path = Path(path)
    if not path.exists():
        return None
    for module in source_kinds():
        kind = module.claims(path, spec)
        if kind is not None:
            return module, kind
    return None


def claimed(path: Path, spec: str | None) -> tuple[ModuleType, str]:
    """As `claim`, or the UsageProblem that says what the path would have to be."""
    found = claim(path, spec)
    if found is not None:
        return found
    if is_s3(path):
        raise UsageProblem(f"{path}: from object storage packer packs a prefix of files "
                           "without --spec (s3://BUCKET/PREFIX: a folder of images or other "
                           "files), or one object that is a table (.csv, .xlsx ...) or, "
                           "with --spec, a binary dump; copy anything else first (aws s3 cp "
                           f"--recursive {path} .) and pack the local copy")
    if not Path(path).exists():
        raise UsageProblem(f"{path}: no such file or folder")
    hints = [module.UNCLAIMED for module in source_kinds()]
    raise UsageProblem(f"{path}: {hints[0]}; " + ", ".join(hints[1:-1])
                       + (", and " if len(hints) > 2 else "") + hints[-1])


def open_source(path: Path, options):
    """The scanned source for `path`, and the function its jobs are read with."""
    module, kind = claimed(path, options.spec)
    wanted = kind_options(module)
    if options.source is None:
        options = replace(options, source=wanted())
    elif not isinstance(options.source, wanted):
        raise UsageProblem(f"{path} is {kind_info(kind).taken_for}, whose options are a "
                           f"{wanted.__name__}, not a {type(options.source).__name__}: give "
                           f"PackOptions(source={wanted.__name__}(...)), or leave source out")
    return module.scan_input(path if is_s3(path) else Path(path), options)


def kind_options(module: ModuleType) -> type:
    """The options dataclass of the source kind `module` (its OPTIONS_MODULE's Options)."""
    return importlib.import_module(module.OPTIONS_MODULE).Options


def option_groups() -> list:
    """Each kind's click options (its OPTIONS_MODULE's click_options), in the registry's
    order: `packer pack` takes them all."""
    return [importlib.import_module(module.OPTIONS_MODULE).click_options
            for module in source_kinds()]


def kind_info(kind: str) -> Kind:
    return all_kinds()[kind]


@cache
def all_kinds() -> dict[str, Kind]:
    return {kind: info for module in source_kinds() for kind, info in module.KINDS.items()}


@cache
def source_options() -> dict[str, Applies]:
    """Every source option with all the kinds that read it (and what each needs)."""
    merged: dict[str, Applies] = {}
    for module in source_kinds():
        for name, applies in module.OPTIONS.items():
            old = merged.get(name, Applies(frozenset()))
            merged[name] = Applies(old.kinds | applies.kinds, {**old.needs, **applies.needs})
    return merged


def recorded_kind(manifest: dict) -> ModuleType | None:
    """The source kind that packed a dataset, from its manifest."""
    recorded = manifest["source"].get("kind")
    return next((m for m in source_kinds() if recorded in m.RECORDED_AS), None)
