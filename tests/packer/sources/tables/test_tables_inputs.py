"""Tables from elsewhere: legacy encodings, compressed files, and what the summary says
about how the table was read."""

import bz2
import gzip
import json

import pandas as pd
import pytest

import packer
from conftest import run
from packer.sources.tables.readers import detect_encoding

HEADERS = ["诊断", "年龄", "性别", "体重", "身高", "血压", "患者", "编号"]


def numeric_rows(count: int) -> str:
    return "".join(f"{i},{i % 7},{i % 3}\n" for i in range(count))


@pytest.mark.parametrize("first,second", [("诊断", "年龄"), ("性别", "体重"), ("编号", "血压"),
                                           ("年龄", "编号"), ("患者", "身高")])
def test_a_gbk_header_over_numbers_is_read_as_gb18030(first, second, tmp_path):
    text = f"id,{first},{second}\n" + numeric_rows(40)
    assert detect_encoding(tmp_path, text.encode("gbk")) == "gb18030"


@pytest.mark.parametrize("name", ["平", "平均", "平均半径"])
def test_a_gbk_export_whose_only_chinese_is_one_column_name_keeps_it(name, tmp_path):
    """As pandas (and Chinese-language Excel and WPS) write GBK: the name is the only
    non-ASCII text, over a breast-cancer-like table of numbers."""
    rows = {"id": range(200), name: [i / 7 for i in range(200)],
            "texture": [i % 13 for i in range(200)], "y": [i % 2 for i in range(200)]}
    pd.DataFrame(rows).to_csv(tmp_path / "t.csv", index=False, encoding="gbk")
    run("pack", tmp_path / "t.csv", "--label-column", "y", "-o", tmp_path / "o", "-q")
    assert packer.load_manifest(tmp_path / "o")["table"]["features"] == ["id", name, "texture"]


@pytest.mark.parametrize("label", ["肿", "良性", "良性肿瘤"])
def test_a_gbk_export_whose_only_chinese_is_in_its_cells_keeps_it(label, tmp_path):
    """(A lone character whose bytes are also a Hangul syllable, 良 and 좁, stays as
    charset-normalizer reads it: nothing in two bytes tells the two apart.)"""
    rows = {"x": range(60), "diagnosis": [label if i % 2 else "B" for i in range(60)]}
    pd.DataFrame(rows).to_csv(tmp_path / "t.csv", index=False, encoding="gbk")
    run("pack", tmp_path / "t.csv", "--label-column", "diagnosis", "-o", tmp_path / "o", "-q")
    assert packer.load_manifest(tmp_path / "o")["classes"] == sorted(["B", label])


def test_a_western_table_with_accented_names_stays_cp1252(tmp_path):
    names = ["François", "Zoë", "José", "Müller", "Ångström", "Æble", "Søren", "Évora"]
    text = "name,score\n" + "".join(f"{names[i % 8]},{i}\n" for i in range(80))
    assert detect_encoding(tmp_path, text.encode("cp1252")) == "cp1252"
    russian = "вид,банк\n1,2\n"  # UTF-8 two-byte letters GB2312 could also read
    assert detect_encoding(tmp_path, russian.encode("utf-8")) == "utf-8"


def test_other_double_byte_tables_keep_their_encoding(tmp_path):
    big5 = "編號,姓名,診斷結果,體重\n" + "".join(f"{i},陳大文,{['良性', '惡性'][i % 2]},{i}\n"
                                               for i in range(30))
    korean = "번호,이름,진단,체중\n" + "".join(f"{i},김민수,{['양성', '악성'][i % 2]},{i}\n"
                                            for i in range(30))
    assert detect_encoding(tmp_path, big5.encode("big5")) == "big5"
    assert detect_encoding(tmp_path, korean.encode("cp949")) == "cp949"


def test_a_gbk_table_packs_its_chinese_names_and_says_the_encoding(tmp_path):
    text = "id,诊断,年龄,性别\n" + "".join(f"{i},{['良性', '恶性'][i % 2]},{i % 9},{i % 2}\n"
                                         for i in range(40))
    (tmp_path / "t.csv").write_bytes(text.encode("gbk"))
    out = run("pack", tmp_path / "t.csv", "--label-column", "诊断", "-o", tmp_path / "o").output
    assert "encoding: gb18030 (detected; if names look garbled, pass --encoding NAME" in out
    manifest = packer.load_manifest(tmp_path / "o")
    assert manifest["table"]["features"] == ["id", "年龄", "性别"]
    assert manifest["classes"] == ["恶性", "良性"]
    assert "label '诊断': 2 classes: 0 恶性, 1 良性" in out
    assert "header: row 1, first data row 2" in out


def test_compressed_tables_are_read_as_their_contents(tmp_path):
    text = "a,b,y\n" + "".join(f"{i},{i * 0.5},{'xy'[i % 2]}\n" for i in range(50))
    (tmp_path / "data.csv").write_text(text)
    with gzip.open(tmp_path / "data.csv.gz", "wt") as file:
        file.write(text)
    with bz2.open(tmp_path / "data.tsv.bz2", "wt") as file:
        file.write(text.replace(",", "\t"))
    run("pack", tmp_path / "data.csv", "--label-column", "y", "-o", tmp_path / "plain", "-q")
    for name in ("data.csv.gz", "data.tsv.bz2"):
        out = run("pack", tmp_path / name, "--label-column", "y", "-o", tmp_path / name[5:],
                  "--json").output
        assert json.loads(out)["packed"] == 50
        manifest = packer.load_manifest(tmp_path / name[5:])
        assert manifest["source"]["compression"] in ("gzip", "bz2")
        assert manifest["table"]["stats"] == packer.load_manifest(tmp_path / "plain")["table"][
            "stats"]
    assert "csv, 50 data rows" in run("inspect-table", tmp_path / "data.csv.gz").output


def test_a_text_column_without_a_label_suggests_label_column_first(tmp_path):
    pd.DataFrame({"age": [30, 40, 50], "diagnosis": ["benign", "malignant", "benign"]}) \
        .to_csv(tmp_path / "t.csv", index=False)
    out = run("pack", tmp_path / "t.csv", "-o", tmp_path / "o").output
    assert "no label column: pass --label-column NAME if one holds the labels (text columns: " \
           "'diagnosis')" in out
    reason = packer.load_manifest(tmp_path / "o")["table"]["left_out"]["diagnosis"]
    assert reason.index("--label-column diagnosis") < reason.index("--categorical")


def test_a_misspelt_label_column_lists_every_column_closest_first(tmp_path):
    names = [f"feature_{i:03d}" for i in range(60)] + ["diagnosis"]
    pd.DataFrame([list(range(61))], columns=names).to_csv(tmp_path / "t.csv", index=False)
    out = run("pack", tmp_path / "t.csv", "--label-column", "diagnosys", "-o", tmp_path / "o",
              expect=2).output
    assert "did you mean 'diagnosis'?" in out
    assert all(repr(name) in out for name in names)
    wide = [f"f{i}" for i in range(400)] + ["Outcome"]
    pd.DataFrame([list(range(401))], columns=wide).to_csv(tmp_path / "w.csv", index=False)
    out = run("pack", tmp_path / "w.csv", "--label-column", "outcome", "-o", tmp_path / "o",
              expect=2).output
    assert "did you mean 'Outcome'?" in out and "'Outcome'" in out.split("include")[1]


def test_the_summary_names_the_sheet_and_the_other_sheets(tmp_path):
    path = tmp_path / "book.xlsx"
    with pd.ExcelWriter(path) as writer:
        pd.DataFrame({"title": ["export of 2026"]}).to_excel(writer, sheet_name="Notes",
                                                              index=False, header=False)
        frame = pd.DataFrame({"x": [1.0, 2.0, 3.0, 4.0], "label": ["a", "b", "a", "b"]})
        frame.to_excel(writer, sheet_name="Data", index=False, startrow=2)
    out = run("pack", path, "--sheet", "Data", "--label-column", "label", "-o",
              tmp_path / "o").output
    assert "sheet 'Data'; other sheets: 'Notes' (--sheet NAME packs one)" in out
    assert "header: row 3, first data row 4" in out
    assert "label 'label': 2 classes: 0 a, 1 b" in out


def test_a_table_is_read_by_its_bytes_not_its_name(tmp_path):
    (tmp_path / "plain.csv.gz").write_text("a,b\n1,2\n3,4\n")  # named .gz, not compressed
    run("pack", tmp_path / "plain.csv.gz", "-o", tmp_path / "o", "-q")
    assert packer.load_manifest(tmp_path / "o")["source"]["compression"] is None
    with gzip.open(tmp_path / "hidden.csv", "wt") as file:  # compressed, named .csv
        file.write("a,b\n1,2\n3,4\n")
    out = run("pack", tmp_path / "hidden.csv", "-o", tmp_path / "p").output
    assert "read from gzip-compressed" in out and "packed 2 samples" in out


def test_accents_first_met_past_the_first_mebibyte_decide_the_encoding(tmp_path):
    rows = "".join(f"{i},{i % 5},Paris\n" for i in range(120_000))  # about 1.6 MB of ASCII
    text = "id,z,city\n" + rows + "".join(f"{i},1,Montréal\n" for i in range(50))
    (tmp_path / "t.csv").write_bytes(text.encode("cp1252"))
    out = run("pack", tmp_path / "t.csv", "--categorical", "city", "-o", tmp_path / "o").output
    manifest = packer.load_manifest(tmp_path / "o")
    assert manifest["source"]["encoding"] != "utf-8" and "encoding: " in out
    assert manifest["table"]["categorical"]["city"] == ["Montréal", "Paris"]
