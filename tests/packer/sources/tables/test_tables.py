"""Tables into all three formats: values equal to pandas reading the same file."""

import json

import h5py
import numpy as np
import pandas as pd
import pytest
from openpyxl import Workbook

import packer
from conftest import run
from packer.formats import FORMAT_NAMES

FEATURES = ["f1", "f2", "体重"]


def frame(rows: int = 40, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "id": [f"p{i:03d}.x" for i in range(rows)],
        "f1": rng.normal(size=rows).round(4),
        "f2": rng.integers(-5, 50, rows),
        "体重": rng.uniform(40, 90, rows).round(2),
        "diagnosis": rng.choice(["flu", "cold", "感冒"], rows),
    })


def write(df: pd.DataFrame, path, **kw):
    suffix = path.suffix
    if suffix in (".csv", ".txt"):
        df.to_csv(path, index=False, **kw)
    elif suffix == ".tsv":
        df.to_csv(path, index=False, sep="\t", **kw)
    elif suffix == ".parquet":
        df.to_parquet(path, index=False)
    elif suffix == ".xlsx":  # title lines above the header, and a second sheet
        book = Workbook()
        sheet = book.active
        sheet.title = "Data"
        sheet.append(["Quarterly export", None, None])
        sheet.append(["generated 2024-05-01"])
        sheet.append(list(df.columns))
        for row in df.itertuples(index=False):
            sheet.append([v.item() if hasattr(v, "item") else v for v in row])
        other = book.create_sheet("Other")
        other.append(["a", "b", "label"])
        for i in range(7):
            other.append([i, i * 2.5, "yes" if i % 2 else "no"])
        book.save(path)
    return path


def read_back(path) -> list[dict]:
    ds = packer.open_dataset(path, shuffle=False, decode="raw")
    return [{k: (v.numpy() if hasattr(v, "numpy") else v) for k, v in s.items()} for s in ds]


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".xlsx", ".parquet"])
def test_round_trip_into_every_format(tmp_path, suffix):
    df = frame()
    source = write(df, tmp_path / f"t{suffix}")
    expected = pd.read_excel(source, header=2, engine="openpyxl") if suffix == ".xlsx" else (
        pd.read_parquet(source) if suffix == ".parquet" else
        pd.read_csv(source, sep="\t" if suffix == ".tsv" else ","))
    values = expected[FEATURES].to_numpy(np.float32)
    classes = sorted(set(expected["diagnosis"]))
    seen = {}
    for fmt in FORMAT_NAMES:
        out = tmp_path / f"out-{fmt}"
        run("pack", source, "--to", fmt, "--label-column", "diagnosis", "-o", out, "-q")
        manifest = packer.load_manifest(out)
        assert manifest["classes"] == classes
        assert manifest["table"]["features"] == FEATURES  # unicode names kept exactly
        assert manifest["table"]["left_out"] == {"id": "text; pass --categorical to include it"}
        samples = read_back(out)
        np.testing.assert_array_equal(np.stack([s["npy"] for s in samples]), values)
        assert [classes[s["cls"]] for s in samples] == list(expected["diagnosis"])
        assert [s["__key__"] for s in samples] == [f"{i:010d}" for i in range(len(df))]
        stats = manifest["table"]["stats"]["f1"]
        assert stats["mean"] == pytest.approx(values[:, 0].astype(float).mean(), rel=1e-6)
        assert stats["std"] == pytest.approx(values[:, 0].astype(float).std(), rel=1e-5)
        assert stats["min"] == pytest.approx(values[:, 0].min())
        run("verify", out, "-q")
        seen[fmt] = samples
    with h5py.File(tmp_path / "out-hdf5") as f:
        assert f["features"].shape == (len(df), 3) and f["features"].dtype == np.float32
        assert f["features"].chunks is not None
        np.testing.assert_array_equal(f["labels"][:], [classes.index(c)
                                                      for c in expected["diagnosis"]])
        assert json.loads(f.attrs["packer_manifest"])["table"]["features"] == FEATURES


def test_xlsx_second_sheet_and_header_row(tmp_path):
    source = write(frame(), tmp_path / "t.xlsx")
    out = tmp_path / "other.h5"
    run("pack", source, "--sheet", "Other", "--to", "hdf5", "--label-column", "label",
        "-o", out, "-q")
    samples = read_back(out)
    assert [s["npy"].tolist() for s in samples] == [[i, i * 2.5] for i in range(7)]
    assert packer.open_dataset(out).classes == ["no", "yes"]
    explicit = tmp_path / "explicit.h5"
    run("pack", source, "--header-row", "3", "--to", "hdf5", "--label-column", "diagnosis",
        "-o", explicit, "-q")
    assert len(read_back(explicit)) == 40


def test_key_column_keys_are_stable_in_every_format(tmp_path):
    df = frame(30)
    source = write(df, tmp_path / "t.csv")
    for fmt in FORMAT_NAMES:
        out = tmp_path / f"k-{fmt}"
        run("pack", source, "--to", fmt, "--key-column", "id", "--label-column", "diagnosis",
            "-o", out, "-q")
        keys = [s["__key__"] for s in read_back(out)]
        assert keys == [i.replace(".", "%2E") for i in df["id"]]
    with h5py.File(tmp_path / "k-hdf5") as f:
        assert f["keys"][0].decode() == "p000%2Ex"


def test_gbk_csv_with_chinese_names_and_labels(tmp_path):
    df = pd.DataFrame({"年龄": [31, 45, 27, 60], "血压": [120.5, 130.0, 110.25, 150.0],
                       "诊断": ["高血压", "正常", "正常", "高血压"]})
    source = tmp_path / "病人.csv"
    source.write_bytes(df.to_csv(index=False).encode("gbk"))
    out = tmp_path / "gbk.lmdb"
    result = run("pack", source, "--to", "lmdb", "--label-column", "诊断", "-o", out)
    assert "features: 2 columns: 年龄, 血压" in result.output
    manifest = packer.load_manifest(out)
    assert manifest["source"]["encoding"] == "gb18030"
    assert manifest["classes"] == ["正常", "高血压"]
    samples = read_back(out)
    np.testing.assert_array_equal(np.stack([s["npy"] for s in samples]),
                                  df[["年龄", "血压"]].to_numpy(np.float32))
    report = json.loads(run("inspect-table", source, "--json").output)
    assert report["names"] == ["年龄", "血压", "诊断"]
    assert [c["type"] for c in report["columns"]] == ["integer", "number", "text"]


def test_utf8_bom_semicolons_and_globs(tmp_path):
    source = tmp_path / "bom.csv"
    source.write_bytes(b"\xef\xbb\xbff_a;f_b;g;y\n1;2;3;0\n4;5;6;1\n")
    out = tmp_path / "bom-wds"
    run("pack", source, "--to", "webdataset", "--label-column", "y", "--feature-columns",
        "f_*", "-o", out, "-q")
    manifest = packer.load_manifest(out)
    assert manifest["source"]["delimiter"] == ";" and manifest["source"]["encoding"] == "utf-8-sig"
    assert manifest["table"]["features"] == ["f_a", "f_b"]
    assert [s["npy"].tolist() for s in read_back(out)] == [[1, 2], [4, 5]]
    assert manifest["classes"] == ["0", "1"]


def test_na_policies_categorical_dates_and_regression(tmp_path):
    source = tmp_path / "na.csv"
    source.write_text("size,colour,day,price\n1,red,2024-01-01,1.5\nn/a,blue,2024-01-02,2.5\n"
                      ",red,2024-01-03,3.5\n4,green,2024-01-04,4.5\n")
    common = ["--label-column", "price", "--task", "regress", "--categorical", "colour",
              "--date-columns", "day", "--to", "hdf5", "-q"]
    run("pack", source, *common, "--na", "drop", "-o", tmp_path / "drop.h5")
    drop = packer.load_manifest(tmp_path / "drop.h5")
    assert drop["count"] == 2 and drop["table"]["na"] == {"policy": "drop", "rows": 2,
                                                           "unlabelled_rows": 0,
                                                           "cells": {"size": 2}}
    assert drop["table"]["categorical"] == {"colour": ["blue", "green", "red"]}
    samples = read_back(tmp_path / "drop.h5")
    assert [s["__key__"] for s in samples] == ["0000000000", "0000000003"]
    assert [s["npy"][2] for s in samples] == [0, 3 * 86400]  # seconds since the first day
    assert drop["table"]["date_origins"] == {"day": "2024-01-01T00:00:00+00:00"}
    assert [float(s["target.npy"]) for s in samples] == [1.5, 4.5]
    run("pack", source, *common, "--na", "mean", "-o", tmp_path / "mean.h5")
    mean = read_back(tmp_path / "mean.h5")
    assert [s["npy"][0] for s in mean] == [1, 2.5, 2.5, 4]
    stats = packer.load_manifest(tmp_path / "mean.h5")["table"]["stats"]
    assert stats["size"]["mean"] == pytest.approx(2.5)
    assert stats["size"]["std"] == pytest.approx(np.std([1, 2.5, 2.5, 4]))
    assert stats["colour"]["mean"] == pytest.approx(np.mean([2, 0, 2, 1]))
    run("pack", source, *common, "--na", "zero", "-o", tmp_path / "zero.h5")
    assert [s["npy"][0] for s in read_back(tmp_path / "zero.h5")] == [1, 0, 0, 4]


def test_multi_label_and_many_chunks(tmp_path, monkeypatch):
    import packer.sources.tables.scan as scan
    import packer.sources.tables.source as tables

    monkeypatch.setattr(scan, "CHUNK_CELLS", 64)  # many chunks and many HDF5 blocks
    monkeypatch.setattr(tables, "BLOCK_BYTES", 200)
    rng = np.random.default_rng(1)
    df = pd.DataFrame({"x": rng.normal(size=500).round(3), "cat": rng.choice(list("zyx"), 500),
                       "a": rng.integers(0, 2, 500), "b": rng.integers(0, 2, 500)})
    source = write(df, tmp_path / "multi.csv")
    run("pack", source, "--label-column", "a,b", "--categorical", "cat", "--to", "hdf5",
        "-o", tmp_path / "m.h5", "-q")
    manifest = packer.load_manifest(tmp_path / "m.h5")
    assert len(manifest["parts"]) > 10 and manifest["classes"] is None
    samples = read_back(tmp_path / "m.h5")
    np.testing.assert_array_equal(np.stack([s["target.npy"] for s in samples]),
                                  df[["a", "b"]].to_numpy(np.float32))
    ids = {"x": 0, "y": 1, "z": 2}
    np.testing.assert_array_equal([s["npy"][1] for s in samples], df["cat"].map(ids))
    run("verify", tmp_path / "m.h5", "-q")


def test_hdf5_table_is_columnar_with_keys_and_feature_names(tmp_path):
    (tmp_path / "t.csv").write_text("a,b,y\n1,2,x\n3,4,z\n5,6,x\n")
    run("pack", tmp_path / "t.csv", "--to", "hdf5", "--label-column", "y", "-o",
        tmp_path / "t.h5", "-q")
    with h5py.File(tmp_path / "t.h5") as file:
        assert file["features"][:].tolist() == [[1, 2], [3, 4], [5, 6]]
        assert file["labels"][:].tolist() == [0, 1, 0] and "keys" not in file  # row numbers
        assert list(file.attrs["feature_names"]) == ["a", "b"]


def test_whole_numbers_float32_cannot_hold_are_reported(tmp_path):
    source = tmp_path / "ids.csv"
    source.write_text("id,size,y\n16777217,1,a\n123456789,2,b\n5,3,a\n")
    result = run("pack", source, "--label-column", "y", "--to", "hdf5", "-o", tmp_path / "o")
    manifest = packer.load_manifest(tmp_path / "o")
    assert manifest["table"]["float32_inexact"] == {"id": {"values": 2, "largest_change": 3.0}}
    assert "column 'id': 2 whole numbers are not exact in float32" in result.output


def test_rows_dropped_for_an_empty_label_are_counted(tmp_path):
    source = tmp_path / "m.csv"
    source.write_text("a,b,y\n1,2,x\nn/a,3,y\n4,5,\n6,7,x\n")
    result = run("pack", source, "--label-column", "y", "--na", "drop", "--to", "hdf5",
                 "-o", tmp_path / "o")
    na = packer.load_manifest(tmp_path / "o")["table"]["na"]
    assert (na["rows"], na["unlabelled_rows"]) == (1, 1)
    assert "another 1 row had no usable label" in result.output


def test_decimal_commas_of_a_semicolon_file_are_numbers(tmp_path):
    source = tmp_path / "de.csv"
    source.write_text("Messwerte\nTemp;Druck;Klasse\n1,5;1013,2;a\n2,25;1012;b\n-3,0;1011,5;a\n")
    run("pack", source, "--label-column", "Klasse", "--to", "hdf5", "-o", tmp_path / "o", "-q")
    features = [s["npy"].tolist() for s in read_back(tmp_path / "o")]
    assert features == [[1.5, pytest.approx(1013.2)], [2.25, 1012], [-3, 1011.5]]
    assert "decimal comma" in run("inspect-table", source).output


def test_inspect_table_shows_excel_dates_as_dates(tmp_path):
    source = tmp_path / "dt.xlsx"
    pd.DataFrame({"时间": pd.to_datetime(["2024-01-01 01:00:37", "2024-01-02 00:00:00"]),
                  "y": ["a", "b"]}).to_excel(source, index=False)
    output = run("inspect-table", source).output
    assert "2024-01-01T01:00:37 .. 2024-01-02T00:00:00" in output
    assert "  时间                     date" in output  # two columns per CJK character


def test_commas_before_three_digits_are_not_taken_for_decimal_commas(tmp_path):
    source = tmp_path / "th.csv"
    source.write_text("a;b;y\n1,234;5,678;x\n2,000;3,000;y\n")
    result = run("pack", source, "--label-column", "y", "-o", tmp_path / "o", expect=2)
    assert "'a': numbers with a comma (such as 1,234); pass --decimal ," in result.output
    result = run("pack", source, "--label-column", "y", "--decimal", ",", "--to", "hdf5",
                 "-o", tmp_path / "o")
    assert "numbers read with a decimal comma" in result.output
    assert [s["npy"].tolist() for s in read_back(tmp_path / "o")] == [
        [pytest.approx(1.234), pytest.approx(5.678)], [2, 3]]


def test_thousands_separators_are_read_strictly(tmp_path):
    source = tmp_path / "eu.csv"
    source.write_text("p;q;y\n1.234,5;1;a\n2,25;2;b\n-12.000.000;3;a\n")
    run("pack", source, "--label-column", "y", "--to", "hdf5", "-o", tmp_path / "eu", "-q")
    assert [s["npy"].tolist()[0] for s in read_back(tmp_path / "eu")] == [
        1234.5, 2.25, -12_000_000]
    us = tmp_path / "us.csv"
    us.write_text('p,q,y\n"1,234.5",1,a\n2.25,2,b\n"12,000",3,a\n')
    run("pack", us, "--label-column", "y", "--to", "hdf5", "-o", tmp_path / "us", "-q")
    assert [s["npy"].tolist()[0] for s in read_back(tmp_path / "us")] == [1234.5, 2.25, 12000]
    # a dot beside a decimal comma is no decimal point: reported, never read as 1.5 or 15
    source.write_text("p;q;y\n1.234,5;1;a\n1.5;2;b\n")
    result = run("pack", source, "--label-column", "y", "--feature-columns", "p", "--to",
                 "hdf5", "-o", tmp_path / "bad", "--decimal", ",", expect=1)
    assert "column 'p', row 3: '1.5': not a number" in result.output


def test_inspect_table_counts_cells_pack_rejects(tmp_path):
    source = tmp_path / "inf.csv"
    source.write_text("a,b,y\n1,2,x\n3,inf,z\n5,-Infinity,x\n1e40,4,z\n")
    report = json.loads(run("inspect-table", source, "--json").output)
    a, b = report["columns"][:2]
    assert (a["non_numeric"], a["example"], a["min"], a["max"]) == (
        1, {"row": 5, "value": "1e+40"}, 1, 5)
    assert (b["non_numeric"], b["example"], b["min"], b["max"]) == (
        2, {"row": 3, "value": "inf"}, 2, 4)
    assert "row 3: 'inf'" in run("inspect-table", source).output
    result = run("pack", source, "--label-column", "y", "-o", tmp_path / "o", expect=1)
    assert ("inf.csv: column 'a', row 5: '1e+40': not a number or beyond float32 range"
            in result.output and result.output.rstrip().endswith("; also column 'b', row 3: 'inf'"))
