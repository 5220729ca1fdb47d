"""Every bad table gets one clear message, a non-zero exit, and leaves no output."""

import json

import h5py
import pytest
from openpyxl import Workbook

from conftest import run


def pack_fails(source, out, *options, expect=1) -> str:
    output = run("pack", source, "--to", "hdf5", "-o", out, "-q", *options,
                 expect=expect).output
    assert "Traceback" not in output and output.startswith("Error: ")
    assert not out.exists() and not out.with_name(out.name + ".partial").exists()
    return output


def text(tmp_path, name: str, content: str):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    return path


def test_empty_file(tmp_path):
    source = text(tmp_path, "empty.csv", "")
    assert "empty.csv: the file is empty" in pack_fails(source, tmp_path / "o")


def test_header_only(tmp_path):
    source = text(tmp_path, "head.csv", "a,b,y\n")
    assert "the header (row 1) is followed by no data rows" in pack_fails(source, tmp_path / "o")


def test_ragged_rows(tmp_path):
    source = text(tmp_path, "rag.csv", "a,b,y\n1,2,0\n3,4,1\n5,6,7,8\n")
    message = pack_fails(source, tmp_path / "o", "--label-column", "y")
    assert "rag.csv: ragged rows: row 4 has 4 fields, expected 3" in message


def test_short_row_is_an_empty_cell(tmp_path):
    source = text(tmp_path, "short.csv", "a,b,y\n1,2,0\n3\n")
    message = pack_fails(source, tmp_path / "o")
    assert "column 'b', row 3: ''" in message


def test_missing_label_column(tmp_path):
    source = text(tmp_path, "t.csv", "a,b,y\n1,2,0\n")
    message = pack_fails(source, tmp_path / "o", "--label-column", "diagnosis", expect=2)
    assert ("--label-column diagnosis: " in message and "has no column named 'diagnosis'; its "
            "columns are 'a', 'b', 'y'" in message)


def test_missing_sheet(tmp_path):
    book = Workbook()
    book.active.title = "Data"
    book.active.append(["a", "y"])
    book.active.append([1, 0])
    book.create_sheet("Other")
    book.save(tmp_path / "book.xlsx")
    message = pack_fails(tmp_path / "book.xlsx", tmp_path / "o", "--sheet", "Summary", expect=2)
    assert "--sheet Summary: " in message and "its sheets are 'Data', 'Other'" in message


def test_duplicate_column_names(tmp_path):
    source = text(tmp_path, "dup.csv", "a,b,a\n1,2,3\n")
    message = pack_fails(source, tmp_path / "o")
    assert "the header (row 1) names column 'a' twice (columns 1 and 3)" in message


def test_text_in_a_feature_column_names_column_row_and_value(tmp_path):
    rows = "".join(f"{i},{i * 2},0\n" for i in range(1230))
    source = text(tmp_path, "size.csv", "size,w,y\n" + rows + "n/a,5,1\n")
    message = pack_fails(source, tmp_path / "o", "--label-column", "y")
    assert "size.csv: column 'size', row 1232: 'n/a': not a number; pass --na drop" in message


def test_text_labels_for_regression_and_fractional_class_labels(tmp_path):
    source = text(tmp_path, "r.csv", "a,y\n1,0.5\n2,high\n")
    message = pack_fails(source, tmp_path / "o", "--label-column", "y", "--task", "regress")
    assert "label column 'y', row 3: 'high'" in message
    fractional = text(tmp_path, "f.csv", "a,y\n1,0.5\n2,1.25\n")
    message = pack_fails(fractional, tmp_path / "o", "--label-column", "y", expect=2)
    assert "pass --task regress" in message


def test_duplicate_keys(tmp_path):
    source = text(tmp_path, "k.csv", "id,a\nx,1\ny,2\nx,3\n")
    message = pack_fails(source, tmp_path / "o", "--key-column", "id")
    assert "key column 'id' repeats the key 'x' (data rows 1 and 3)" in message


def test_bad_encoding_override_and_not_a_table(tmp_path):
    source = tmp_path / "g.csv"
    source.write_bytes("名,值\n甲,1\n".encode("gbk"))
    message = pack_fails(source, tmp_path / "o", "--encoding", "utf-8")
    assert "not valid utf-8 text" in message and "pass --encoding" in message
    other = text(tmp_path, "notes.md", "hello")
    assert "a table must end in .csv" in pack_fails(other, tmp_path / "o", expect=2)


@pytest.mark.parametrize("name", ["empty.csv", "head.csv"])
def test_inspect_table_errors_too(tmp_path, name):
    source = text(tmp_path, name, "" if name == "empty.csv" else "a,b\n")
    output = run("inspect-table", source, expect=1 if name == "empty.csv" else 0).output
    assert "Traceback" not in output


def test_a_bad_date_is_called_a_date(tmp_path):
    source = tmp_path / "bd.csv"
    source.write_text("ts,v,y\n2024-01-01,1,a\n2024-13-45,2,b\n")
    result = run("pack", source, "--label-column", "y", "--date-columns", "ts", "-o",
                 tmp_path / "o", expect=1)
    assert "column 'ts', row 3: '2024-13-45': not a date" in result.output


@pytest.mark.parametrize("key", ["/abs", "x/../../etc", "a\\\\b", "a//b", "./c", "d/", ".",
                                 "e/./f"])
def test_a_key_that_is_not_a_relative_path_is_refused(tmp_path, key):
    source = tmp_path / "k.csv"
    source.write_text(f"id,a,y\n{key},1,x\nok,2,y\n")
    result = run("pack", source, "--key-column", "id", "--label-column", "y", "-o",
                 tmp_path / "o", expect=1)
    assert "key column 'id', row 2" in result.output and "relative path" in result.output


def test_a_number_beyond_float32_range_is_a_bad_cell(tmp_path):
    source = text(tmp_path, "big.csv", "a,b,y\n1,2,x\n1e40,3,z\n-5e39,4,x\n7,5,z\n")
    message = pack_fails(source, tmp_path / "o", "--label-column", "y")
    assert ("big.csv: column 'a', row 3: '1e+40'; row 4: '-5e+39': not a number or beyond "
            "float32 range (±3.4e+38); pass --na drop to leave such rows out" in message)
    result = run("pack", source, "--label-column", "y", "--na", "drop", "--to", "hdf5",
                 "-o", tmp_path / "d")
    assert "not exact in float32" not in result.output and "overflow" not in result.output

    def refuse(constant):
        raise ValueError(constant)

    with h5py.File(tmp_path / "d") as file:  # the manifest is in the file's attributes
        manifest = json.loads(file.attrs["packer_manifest"], parse_constant=refuse)
    assert manifest["table"]["na"]["cells"] == {"a": 2}
    assert manifest["table"]["float32_inexact"] == {}
    assert manifest["table"]["stats"]["a"]["max"] == 7.0
    with h5py.File(tmp_path / "d") as file:
        assert file["features"][:].tolist() == [[1, 2], [7, 5]]


def test_a_bool_among_numbers_is_a_bad_cell_and_a_bool_column_a_feature(tmp_path):
    book = Workbook()
    book.active.append(["p", "flag", "y"])
    for row in [[1, True, "a"], [2, False, "b"], [True, True, "a"], [4, False, "b"]]:
        book.active.append(row)
    book.save(tmp_path / "b.xlsx")
    message = pack_fails(tmp_path / "b.xlsx", tmp_path / "o", "--label-column", "y")
    assert "b.xlsx: column 'p', row 4: 'True': not a number; pass --na drop" in message
    run("pack", tmp_path / "b.xlsx", "--label-column", "y", "--na", "drop", "--to", "hdf5",
        "-o", tmp_path / "d", "-q")
    with h5py.File(tmp_path / "d") as file:
        assert file["features"][:].tolist() == [[1, 1], [2, 0], [4, 0]]


def test_regress_on_a_text_label_says_the_label_is_text(tmp_path):
    rows = "x,species\n" + "".join(f"{i},{['Adelie', 'Gentoo'][i % 2]}\n" for i in range(30))
    (tmp_path / "p.csv").write_text(rows)
    out = run("pack", tmp_path / "p.csv", "--label-column", "species", "--task", "regress",
              "-o", tmp_path / "o", expect=1).output
    assert "the label column 'species' holds text" in out and "--na drop" not in out


def test_na_drop_that_leaves_nothing_names_the_text_column(tmp_path):
    rows = "x,island,y\n" + "".join(f"{i},{['Biscoe', 'Dream'][i % 2]},{i % 2}\n"
                                     for i in range(30))
    (tmp_path / "p.csv").write_text(rows)
    out = run("pack", tmp_path / "p.csv", "--label-column", "y", "--feature-columns", "x,island",
              "--na", "drop", "-o", tmp_path / "o", expect=1).output
    assert "left no rows" in out and "'island' holds no number in any row" in out


def test_a_sheet_that_declares_an_absurd_size_is_refused_not_an_abort(tmp_path):
    """One cell at XFD1048576: the reader would allocate 17 billion cells (SIGABRT)."""
    import subprocess
    import sys

    book = Workbook()
    book.active["A1"], book.active["B1"] = "x", "y"
    book.active["A2"], book.active["B2"] = 1, 0
    book.active["XFD1048576"] = 1
    book.save(tmp_path / "far.xlsx")
    for command in (["pack", str(tmp_path / "far.xlsx"), "-o", str(tmp_path / "o")],
                    ["inspect-table", str(tmp_path / "far.xlsx")]):
        done = subprocess.run([sys.executable, "-m", "packer", *command], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 1, done.stderr[-2000:]
        assert "declares the range A1:XFD1048576" in done.stderr and "Traceback" not in done.stderr


def test_a_table_of_20000_columns_or_a_line_past_csvs_field_limit_reads(tmp_path):
    """csv's default field limit (128 KiB) made both a raw _csv.Error traceback (a row of
    140 KB is one field for every delimiter but the right one)."""
    wide = tmp_path / "wide.csv"
    wide.write_text(",".join(f"col{i:05d}" for i in range(20_000)) + "\n"
                    + ",".join("1" for _ in range(20_000)) + "\n")
    assert "col19999" in run("inspect-table", wide, "--json").output
    long_line = tmp_path / "long.csv"
    long_line.write_text("note,y\n" + "x" * 300_000 + ",1\nshort,0\n")
    out = run("pack", long_line, "--label-column", "y", "-o", tmp_path / "o", expect=2).output
    assert "Traceback" not in out and "'note': text" in out
