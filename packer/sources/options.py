"""A source kind's options: a small dataclass, and its click options built from one
table (each option's flags, type and help, written once), as `train/options.py` builds
the train commands' options.

Each kind declares them in its own `options.py`:

    @dataclass
    class TableOptions(KindOptions):
        sheet: str | None = None
        ...
    CLICK = {"sheet": {"metavar": "NAME", "help": "Excel: the sheet to read ..."}, ...}
    table_options = option_group(TableOptions, CLICK)   # @table_options() on a command

The command line gives every option of every kind in one flat set of values; the kind
that claims the source takes its own with `of(values)`. A manifest records the options
flat too, so `of(manifest["options"])` gives the options a dataset was packed with.
"""

from dataclasses import dataclass, fields
from pathlib import Path

import click


@dataclass
class KindOptions:
    """The options one source kind reads (subclassed by each kind)."""

    @classmethod
    def of(cls, values):
        """This kind's options among `values`, a dict or an object with attributes
        (PackOptions, the manifest's `options`); those missing keep their defaults."""
        found = values if isinstance(values, dict) else vars(values)
        kept = {f.name: found[f.name] for f in fields(cls) if f.name in found}
        if isinstance(kept.get("labels"), str):  # as a manifest records it
            kept["labels"] = Path(kept["labels"])
        for name, value in kept.items():  # click and JSON give lists, the fields hold tuples
            if isinstance(value, list):
                kept[name] = tuple(value)
        return cls(**kept)


def option_group(options_class: type, table: dict[str, dict]):
    """`group(*names)`: the decorator that adds the click options `names` (default: all
    of `table`) to a command, in the table's order. An entry holds click.option's
    keywords, and `flags` when the option is not `--field-name`; the default is the
    dataclass field's unless the entry gives one."""
    defaults = {f.name: f.default for f in fields(options_class)}

    def group(*names: str):
        def decorate(command):
            for name in reversed(names or tuple(table)):
                settings = dict(table[name])
                flags = settings.pop("flags", ("--" + name.replace("_", "-"),))
                settings.setdefault("default", defaults.get(name))
                command = click.option(*flags, name, **settings)(command)
            return command
        return decorate
    return group
