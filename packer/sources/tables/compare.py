"""`packer verify --against` for the tables kind: the table read again with the options
the manifest recorded, its rows compared in order with the samples packed."""

from pathlib import Path

from packer.sources.compare import InOrder, wanted_file
from packer.sources.tables.options import TableOptions
from packer.sources.tables.source import TableSource


def table_against(manifest: dict, path: Path) -> InOrder:
    wanted_file(path, "a table")
    return InOrder(TableSource(path, TableOptions.of(manifest["options"])), path, "row")
