"""Options and parameter types shared by the commands, and how they print."""

import json
import sys
from pathlib import Path

import click

from packer.storage.url import is_s3
from packer.text import size_bytes


def parse_size(text: str) -> int:
    """`256MB` -> 256000000, `1GiB` -> 1073741824, `5e8` -> 500000000."""
    try:
        return size_bytes(text)
    except ValueError as err:
        raise click.BadParameter(str(err)) from None


MIN_SHARD_SIZE = 10 << 10


class Location(click.ParamType):
    """A local path (given as a Path) or an s3:// URL (kept as it is written)."""

    name = "PATH|s3://BUCKET/PREFIX"

    def convert(self, value, param, ctx):
        return value if isinstance(value, Path) or is_s3(value) else Path(value)


class Size(click.ParamType):
    name = "SIZE"

    def convert(self, value, param, ctx):
        return value if isinstance(value, int) else parse_size(value)


def positive_size(ctx, param, value: int | None) -> int | None:
    if value is not None and value <= 0:
        raise click.BadParameter(f"{value}: give a size above 0, e.g. 20GB")
    return value


class PartOption(click.Option):
    """A part bound (packer.packing.options.PART_OPTIONS): `{formats}` in its help becomes
    the formats that read it, looked up when the help is shown (so that a command line
    that packs imports no format it does not write)."""

    def get_help_record(self, ctx):
        from packer.packing.options import formats_reading

        template = self.help
        self.help = template.replace("{formats}", ", ".join(formats_reading(self.name)))
        try:
            return super().get_help_record(ctx)
        finally:
            self.help = template


def shard_size(ctx, param, value: int) -> int:
    if value < MIN_SHARD_SIZE:
        raise click.BadParameter(f"{value:,} bytes is too small; give at least 10KiB")
    return value


def show_progress(quiet: bool) -> bool:
    """Progress bars only for a person watching a terminal."""
    return not quiet and sys.stderr.isatty()


def emit_json(data: dict) -> None:
    click.echo(json.dumps(data, indent=1, ensure_ascii=False))


json_option = click.option("--json", "as_json", is_flag=True,
                           help="Print machine-readable JSON instead of text.")
quiet_option = click.option("--quiet", "-q", is_flag=True,
                            help="No progress bar (none is drawn when stderr is not a terminal).")


def cache_options(command):
    """--cache-dir and --cache-limit: the part cache of s3:// datasets."""
    command = click.option(
        "--cache-limit", type=Size(), callback=positive_size,
        help="s3:// datasets: at most this much in the cache, e.g. --cache-limit 20GB "
             "(default: 20 GB, and at most 80% of the disk's free space).")(command)
    return click.option(
        "--cache-dir", type=click.Path(file_okay=False, path_type=Path),
        help="s3:// datasets: the folder that parts are downloaded into and read from, "
             "shared safely by every process that names it, e.g. --cache-dir "
             "/scratch/packer-cache (default: ~/.cache/packer).")(command)
