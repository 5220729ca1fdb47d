"""The `packer` command line: click commands only; each parses its options, calls the
library and prints text or JSON (the views are in report.py).

    group.py            PackerGroup: library errors as one-line messages, exit 2 or 1
    options.py          shared options (--json, -q, sizes, reading a table)
    pack_command.py     pack
    dataset_commands.py inspect, verify, unpack
    bench_command.py    bench
    table_commands.py   inspect-table        binary_commands.py  inspect-binary
    view_command.py     view (the page itself: packer/view/)
"""

import click

from packer.cli.bench_command import bench
from packer.cli.binary_commands import inspect_binary
from packer.cli.dataset_commands import inspect, unpack, verify
from packer.cli.group import PackerGroup
from packer.cli.pack_command import pack
from packer.cli.table_commands import inspect_table
from packer.cli.view_command import view
from packer.version import __version__


@click.group(cls=PackerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="packer")
def cli():
    """Pack folders of small files, tables and binary dumps into WebDataset shards,
    LMDB, HDF5 or TFRecord (the formats of `packer pack --to`).

    \b
    Example:
      packer pack ./images --to webdataset -o ./images-wds
      packer inspect ./images-wds
      packer verify ./images-wds --against ./images
      packer unpack ./images-wds -o ./restored
      packer view ./images-wds -o view.html
    """


for command in (pack, inspect, verify, unpack, view, bench, inspect_binary, inspect_table):
    cli.add_command(command)


def main():
    cli(prog_name="packer")
