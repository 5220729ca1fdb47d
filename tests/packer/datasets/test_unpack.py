"""Unpack: real .npy files for array fields, labels files, safe output folders."""

import csv
import json

import numpy as np
import pytest
from dumps import write_imu

from conftest import run
from packer.formats.webdataset import read_shard
from packer.sample import field_bytes


def npy_files(folder) -> dict:
    return {p.relative_to(folder).as_posix(): np.load(p) for p in sorted(folder.rglob("*.npy"))}


def labels_rows(folder) -> list:
    with open(folder / "labels.csv", encoding="utf-8") as f:
        return list(csv.reader(f))


@pytest.fixture
def table(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("id,a,b,y\nr1,1.5,2,cat\nr2,3,4,dog\nr3,5,6,cat\n")
    return path


@pytest.mark.parametrize("window", [[], ["--window", "4", "--stride", "2"]])
def test_binary_dumps_unpack_to_the_same_npy_files_from_every_format(window, tmp_path):
    dump = tmp_path / "imu.bin"
    write_imu(dump, 12, "little")
    unpacked = {}
    for fmt in ("webdataset", "hdf5", "lmdb"):
        out = tmp_path / fmt
        run("pack", dump, "--spec", "imu", "--to", fmt, "-o", out, "--label-field", "status",
            *window, "-q")
        run("unpack", out, "-o", tmp_path / f"un-{fmt}", "-q")
        unpacked[fmt] = npy_files(tmp_path / f"un-{fmt}")
        assert labels_rows(tmp_path / f"un-{fmt}") == labels_rows(tmp_path / "un-webdataset")
    assert unpacked["webdataset"] and unpacked["hdf5"].keys() == unpacked["webdataset"].keys()
    for name, array in unpacked["webdataset"].items():
        for fmt in ("hdf5", "lmdb"):
            assert np.array_equal(unpacked[fmt][name], array) and unpacked[fmt][name].shape == \
                array.shape, (fmt, name)


def test_unpacked_npy_bytes_are_those_of_field_bytes(table, tmp_path):
    run("pack", table, "--label-column", "y", "--key-column", "id", "--to", "hdf5",
        "-o", tmp_path / "h", "-q")
    run("pack", table, "--label-column", "y", "--key-column", "id", "-o", tmp_path / "w", "-q")
    run("unpack", tmp_path / "h", "-o", tmp_path / "un", "-q")
    shard = next(read_shard(tmp_path / "w" / "shard-000000.tar"))
    assert (tmp_path / "un" / "r1.npy").read_bytes() == shard["npy"]
    assert shard["npy"] == field_bytes(np.load(tmp_path / "un" / "r1.npy"))
    assert labels_rows(tmp_path / "un") == [["filename", "label"], ["r1.npy", "cat"],
                                            ["r2.npy", "dog"], ["r3.npy", "cat"]]


def test_unpack_into_a_file_is_a_one_line_error(table, tmp_path):
    run("pack", table, "--label-column", "y", "-o", tmp_path / "w", "-q")
    precious = tmp_path / "precious.txt"
    precious.write_text("important")
    assert "is a file" in run("unpack", tmp_path / "w", "-o", precious, expect=2).output
    assert "is a file" in run("pack", table, "--label-column", "y", "-o", precious,
                              "--overwrite", expect=2).output
    assert precious.read_text() == "important"


def test_unpack_overwrite_replaces_only_an_earlier_unpack(table, tmp_path):
    run("pack", table, "--label-column", "y", "-o", tmp_path / "w", "-q")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.txt").write_text("important")
    result = run("unpack", tmp_path / "w", "-o", mine, "--overwrite", expect=2)
    assert "not written by `packer unpack`" in result.output
    assert (mine / "thesis.txt").read_text() == "important"
    run("unpack", tmp_path / "w", "-o", tmp_path / "un", "-q")
    assert json.loads((tmp_path / "un" / ".packer-unpack.json").read_text())
    run("unpack", tmp_path / "w", "-o", tmp_path / "un", "--overwrite", "-q")
    assert (tmp_path / "un" / "0000000000.npy").is_file()


def test_unpack_refusing_an_unsafe_key_leaves_nothing(tmp_path):
    import lmdb
    import msgpack

    table = tmp_path / "t.csv"
    table.write_text("id,a,y\nevil,1,x\nok,2,y\n")
    run("pack", table, "--label-column", "y", "--key-column", "id", "--to", "lmdb",
        "-o", tmp_path / "w", "-q")
    with lmdb.open(str(tmp_path / "w")) as env, env.begin(write=True) as txn:
        sample = msgpack.unpackb(txn.get(b"%010d" % 0))
        txn.put(b"%010d" % 0, msgpack.packb({**sample, "__key__": "../evil"}))
    result = run("unpack", tmp_path / "w", "-o", tmp_path / "un", expect=1)
    assert "would leave the output folder" in result.output
    assert not (tmp_path / "un.partial").exists() and not (tmp_path / "un").exists()


def test_no_progress_bar_when_stderr_is_not_a_terminal(table, tmp_path):
    result = run("pack", table, "--label-column", "y", "-o", tmp_path / "w")
    assert "packing to" not in result.output
    result = run("unpack", tmp_path / "w", "-o", tmp_path / "un")
    assert "unpacking" not in result.output and "unpacked 3 samples" in result.output


def test_the_unpacked_labels_file_never_replaces_an_unpacked_file(tmp_path):
    folder = tmp_path / "flat"
    folder.mkdir()
    (folder / "labels.csv").write_text("a data file that happens to be called labels.csv\n")
    (folder / "notes.txt").write_text("hello\n")
    labels = tmp_path / "my-labels.csv"
    labels.write_text("filename,label\nlabels.csv,x\nnotes.txt,y\n")
    run("pack", folder, "--labels", labels, "-o", tmp_path / "w", "-q")
    run("unpack", tmp_path / "w", "-o", tmp_path / "un", "-q")
    assert (tmp_path / "un" / "labels.csv").read_bytes() == (folder / "labels.csv").read_bytes()
    rows = list(csv.reader((tmp_path / "un" / "labels-2.csv").open()))
    assert rows == [["filename", "label"], ["labels.csv", "x"], ["notes.txt", "y"]]
