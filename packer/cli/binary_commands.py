"""`packer inspect-binary`: options in, the library's report out."""

import json
import os
import sys
from pathlib import Path

import click

from packer.sources.binary import shipped_spec_names


class _ByteOffset(click.ParamType):
    """A byte count in decimal or 0x hex, `least` or more."""

    name = "N"

    def __init__(self, least: int = 0):
        self.least = least

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        try:
            number = int(value, 0)
        except ValueError:
            self.fail(f"{value!r} is not a byte count; use e.g. 64 or 0x40", param, ctx)
        if number < self.least:
            self.fail(f"{value!r}: give {self.least} or more", param, ctx)
        return number


@click.command("inspect-binary")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--spec", "spec", metavar="SPEC",
              help="Spec file (.toml) describing the header and records, or the name of a "
                   f"shipped spec: {', '.join(shipped_spec_names())}.")
@click.option("--hex", "hex_view", is_flag=True,
              help="Show the bytes: without --spec as offset | hex | ASCII with hints for "
                   "writing a spec; with --spec each field's bytes and decoded value.")
@click.option("--offset", type=_ByteOffset(),
              help="Without --spec: first byte shown (decimal or 0x hex). [default: 0]")
@click.option("--length", type=_ByteOffset(least=1),
              help="Without --spec: bytes shown. [default: 256]")
@click.option("--records", type=click.IntRange(min=1),
              help="With --spec --hex: records shown. [default: 3]")
@click.option("--record", type=click.IntRange(min=0),
              help="With --spec --hex: the first record shown (0-based). [default: 0]")
@click.option("--both-orders", is_flag=True,
              help="With --spec --hex: decode each multi-byte field little- and big-endian.")
@click.option("--tail", type=click.Choice(["error", "drop"]),
              help="Bytes after the last whole record: error, or drop them (a cut last "
                   "record included). [default: the spec's trailing rule]")
@click.option("--json", "as_json", is_flag=True,
              help="Print machine-readable JSON instead of text.")
def inspect_binary(file, as_json, **options):
    """Show a binary file's bytes, or check it against a spec file.

    Without --spec: a hex view of the first 256 bytes with hints for writing a
    spec (strings, likely record sizes, sizes that divide the file). With
    --spec: header values, record count, per-field min/max/mean and every check
    (exit status 1 if one fails). With --spec --hex: the spec laid over the bytes.

    \b
    Example:
      packer inspect-binary imu.bin --hex
      packer inspect-binary imu.bin --spec imu.toml
      packer inspect-binary imu.bin --spec imu.toml --hex --record 100 --records 2
      packer inspect-binary train-images-idx3-ubyte --spec mnist-idx --json
    """
    from packer.sources.binary.report import binary_report, binary_report_text

    report = binary_report(file, **options)
    if as_json:
        click.echo(json.dumps(report, indent=1, ensure_ascii=False))
    else:
        color = sys.stdout.isatty() and "NO_COLOR" not in os.environ
        click.echo(binary_report_text(report, color=color), color=color)
    sys.exit(0 if report["ok"] else 1)
