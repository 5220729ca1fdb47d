"""Each source kind's options: one dataclass and its click options per kind, which
`packer pack` takes together; PackOptions holds the shared ones and the kind's."""

from dataclasses import fields
from importlib import import_module
from pathlib import Path

import click
import pytest

import packer
from conftest import class_images, run
from packer.cli import pack
from packer.errors import UsageProblem
from packer.packing.options import RECORDED_ORDER, PackOptions, pack_options
from packer.sources import kind_options, source_kinds
from packer.sources.files.options import FolderOptions
from packer.sources.tables.options import TableOptions


def _flags(decorate) -> set[str]:
    return {param.name for param in decorate(click.command()(lambda **_: None)).params}


def test_each_option_of_a_kind_has_one_flag_among_the_kinds_groups():
    declared: list[str] = []
    for module in source_kinds():
        options = kind_options(module)
        group = _flags(import_module(module.OPTIONS_MODULE).click_options())
        declared += group
        assert group <= {f.name for f in fields(options)}, module.NAME
        assert set(module.OPTIONS) <= {f.name for f in fields(options)} | set(
            PackOptions.__dataclass_fields__), module.NAME
    assert len(declared) == len(set(declared)), "an option declared by two kinds"
    every = {f.name for m in source_kinds() for f in fields(kind_options(m))}
    assert every == set(declared)  # each field has a flag, in some kind's group
    assert set(declared) <= {param.name for param in pack.params}


def test_the_command_line_gives_the_claiming_kind_its_own_options(tmp_path):
    table = tmp_path / "t.csv"
    table.write_text("x,y\n1,0\n")
    values = {"to": "hdf5", "label_column": ("y",), "encoding": "utf-8", "labels": None,
              "window": None, "workers": 2}
    options, warning = pack_options(table, values, {"label_column", "encoding", "workers"})
    assert warning is None and options.workers == 2
    assert options.source == TableOptions(label_column=("y",), encoding="utf-8")
    folder = class_images(tmp_path / "images", 1, 1)
    values.update(label_column=(), labels=Path("labels.csv"))
    options, _ = pack_options(folder, values, {"encoding", "labels"})
    assert options.source == FolderOptions(labels=Path("labels.csv"), encoding="utf-8")


def test_a_manifest_records_every_kinds_options_flat_and_gives_them_back(tmp_path):
    labels = tmp_path / "labels.csv"
    labels.write_text("0.jpg,a\n")
    options = PackOptions(to="lmdb", source=FolderOptions(labels=labels, group_by_stem=True))
    recorded = options.recorded()
    assert recorded["labels"] == str(labels.resolve()) and recorded["group_by_stem"]
    assert recorded["window"] is None and recorded["na"] == "fail"  # other kinds' defaults
    assert "source" not in recorded and "workers" not in recorded
    assert list(recorded) == [name for name in RECORDED_ORDER if name in recorded]  # as ever
    assert FolderOptions.of(recorded) == FolderOptions(labels=labels.resolve(),
                                                       group_by_stem=True)
    assert TableOptions.of({**recorded, "label_column": ["y"]}).label_column == ("y",)


def test_the_library_takes_a_kinds_options_and_refuses_another_kinds(tmp_path):
    table = tmp_path / "t.csv"
    table.write_text("x,diagnosis\n1,flu\n2,cold\n3,flu\n")
    manifest = packer.pack(table, tmp_path / "t.h5", PackOptions(
        to="hdf5", progress=False, source=TableOptions(label_column=("diagnosis",))))
    assert manifest["classes"] == ["cold", "flu"] and manifest["count"] == 3
    assert "OK: 3 samples" in run("verify", tmp_path / "t.h5", "--against", table).output
    with pytest.raises(UsageProblem, match="TableOptions, not a FolderOptions"):
        packer.pack(table, tmp_path / "f.h5", PackOptions(to="hdf5", progress=False,
                                                          source=FolderOptions()))
    assert not Path(tmp_path / "f.h5").exists()
