"""Write docs/cli.md, the command reference, from the commands' own --help.

    python tools/cli_reference.py            # rewrites docs/cli.md
    python tools/cli_reference.py --check    # exit 1 when docs/cli.md is stale

Each option's text lives once, in its click declaration; this page is made from it.
"""

import sys
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "cli.md"
WIDTH = 100  # --help is wrapped at a fixed width, so the page does not depend on the terminal


def help_text(group: click.Group, name: str, command: click.Command | None = None) -> str:
    """The --help output of `name` (the group itself when `command` is None)."""
    target = command or group
    parent = click.Context(group, info_name=group.name, terminal_width=WIDTH,
                           max_content_width=WIDTH)
    context = parent if command is None else click.Context(
        command, info_name=name, parent=parent, terminal_width=WIDTH, max_content_width=WIDTH)
    return target.get_help(context)


def reference() -> str:
    from packer.cli import cli as packer_cli
    from train.cli import cli as train_cli

    lines = ["# Command reference", "",
             "Generated from each command's `--help` by `python tools/cli_reference.py`; "
             "a test fails when it is stale. Task by task, the commands are explained in the "
             "other pages of [docs/](../README.md#documentation).", ""]
    for program, group in (("packer", packer_cli), ("train", train_cli)):
        group.name = program
        lines += [f"## `{program}`", "", "```", help_text(group, program).rstrip(), "```", ""]
        for name in sorted(group.commands):
            command = group.commands[name]
            lines += [f"### `{program} {name}`", "", "```",
                      help_text(group, name, command).rstrip(), "```", ""]
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    text = reference()
    if "--check" in sys.argv[1:]:
        if not PAGE.exists() or PAGE.read_text(encoding="utf-8") != text:
            print(f"{PAGE} is stale: run python tools/cli_reference.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
