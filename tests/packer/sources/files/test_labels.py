"""Labels files and label sources: read robustly, reported in the summary."""

import json

import pytest

import packer
from conftest import image_bytes, run
from packer.packing.tally import nothing_packed


@pytest.fixture
def flat(tmp_path):
    root = tmp_path / "flat"
    root.mkdir()
    for i in range(4):
        (root / f"img{i}.jpg").write_bytes(image_bytes(i))
    return root


def classes_of(out) -> dict:
    return json.loads(run("inspect", out, "--json").output)["classes"]


def test_conflicting_duplicate_rows_are_an_error_naming_both_lines(flat, tmp_path):
    labels = tmp_path / "l.csv"
    labels.write_text("filename,label\nimg0.jpg,bird\nimg1.jpg,cat\nimg1.jpg,cat\n\n"
                      "img0.jpg , dog\n")
    result = run("pack", flat, "--labels", labels, "-o", tmp_path / "o", expect=1)
    assert "img0.jpg has two labels: 'bird' on line 2 and 'dog' on line 6" in result.output
    assert not (tmp_path / "o").exists() and not (tmp_path / "o.partial").exists()


def test_an_unknown_header_word_is_not_a_class(flat, tmp_path):
    labels = tmp_path / "l.csv"
    labels.write_text("fname,klass\nimg0.jpg,c0\nimg1.jpg,c1\nimg2.jpg,c0\nimg3.jpg,c1\n")
    run("pack", flat, "--labels", labels, "-o", tmp_path / "o", "-q")
    assert classes_of(tmp_path / "o") == {"c0": 2, "c1": 2}


def test_a_class_with_no_samples_is_reported(flat, tmp_path):
    labels = tmp_path / "l.csv"
    labels.write_text("img0.jpg,a\nimg1.jpg,b\ngone.jpg,c\n")
    result = run("pack", flat, "--labels", labels, "-o", tmp_path / "o", "-q")
    assert "labels: l.csv (3 classes)" in result.output
    assert "classes with no samples: c" in result.output
    inspected = run("inspect", tmp_path / "o").output
    assert "classes with no samples: c" in inspected


def test_labels_paths_encoding_delimiter_and_line_numbers(flat, tmp_path):
    labels = tmp_path / "l.csv"
    labels.write_bytes("图片文件;动物类别\r\n./img0.jpg;猫咪\r\n.\\img1.jpg;小狗\r\n".encode("gbk"))
    run("pack", flat, "--labels", labels, "-o", tmp_path / "o", "-q")
    assert classes_of(tmp_path / "o") == {"猫咪": 1, "小狗": 1}
    labels.write_text("filename\tlabel\n\nimg0.jpg\tx\nimg1.jpg\n")
    result = run("pack", flat, "--labels", labels, "-o", tmp_path / "p", expect=1)
    assert "l.csv, line 4: expected 'filename,label'" in result.output


def test_empty_class_folder_and_stray_top_file_are_reported(tmp_path):
    root = tmp_path / "classes"
    for name in ("cat", "dog", "empty"):
        (root / name).mkdir(parents=True)
    for i, name in enumerate(("cat", "dog")):
        (root / name / "a.jpg").write_bytes(image_bytes(i))
    result = run("pack", root, "-o", tmp_path / "o", "-q")
    assert "labels: class folders (3 classes)" in result.output
    assert "classes with no samples: empty" in result.output
    (root / "stray.jpg").write_bytes(image_bytes(9))  # a README would be a note, no sample
    result = run("pack", root, "-o", tmp_path / "p", "-q")
    expected = (f"labels: none — {root} has files at its top level (stray.jpg) so it is not "
                "an ImageFolder layout; move them or pass --labels")
    assert expected in result.output
    assert json.loads(run("inspect", tmp_path / "p", "--json").output)["labels"] == \
        expected.removeprefix("labels: ")
    assert expected in run("inspect", tmp_path / "p").output


def test_nothing_packed_groups_the_reasons():
    skipped = [{"path": f"bird/{i:03d}.jpg", "reason": "no label in labels.csv"}
               for i in range(128)] + [{"path": "x.jpg", "reason": "empty file"}]
    text = nothing_packed("SRC", skipped, ["img000.jpg", "img001.jpg"])
    assert text.startswith("SRC: nothing to pack: all 129 inputs were skipped: no label in "
                           "labels.csv: 128 (e.g. bird/000.jpg, ")
    assert "the labels file names img000.jpg, img001.jpg; paths are relative to SRC" in text
    assert "empty file: 1 (e.g. x.jpg)" in text
    assert "no input files" in nothing_packed("SRC", [])


def test_shared_stems_list_only_packed_ones(tmp_path):
    root = tmp_path / "s"
    root.mkdir()
    (root / "dup.jpg").write_bytes(image_bytes(1))
    (root / "dup.png").write_bytes(image_bytes(2, "PNG"))
    (root / "trunc.jpg").write_bytes(image_bytes(3)[:100])
    (root / "trunc.png").write_bytes(b"")
    result = run("pack", root, "-o", tmp_path / "o", "-q")
    assert "1 stem is shared by several files" in result.output
    assert "joins them): dup\n" in result.output + "\n"


def test_a_labels_file_in_gbk_can_be_named_and_its_reading_is_shown(tmp_path):
    from conftest import image_bytes

    folder = tmp_path / "flat"
    folder.mkdir()
    for i in range(4):
        (folder / f"img{i}.jpg").write_bytes(image_bytes(i))
    labels = tmp_path / "lab.csv"
    labels.write_bytes("文件,类别\nimg0.jpg,猫\nimg1.jpg,狗\nimg2.jpg,猫\nimg3.jpg,狗\n"
                       .encode("gbk"))
    result = run("pack", folder, "--labels", labels, "--encoding", "gbk", "-o", tmp_path / "o")
    assert "its first row was taken as a header: 文件,类别; read as gbk" in result.output
    assert packer.load_manifest(tmp_path / "o")["classes"] == ["狗", "猫"]


def test_integer_labels_with_a_negative_one_are_ranked_numerically(flat, tmp_path):
    labels = tmp_path / "l.csv"
    labels.write_text("img0.jpg,-1\nimg1.jpg,5\nimg2.jpg,10\nimg3.jpg,5\n")
    result = run("pack", flat, "--labels", labels, "-o", tmp_path / "o")
    assert "class ids are the labels' ranks in numeric order (-1 is 0, 5 is 1, 10 is 2)" \
        in result.output
    assert classes_of(tmp_path / "o") == {"-1": 1, "5": 2, "10": 1}
    manifest = packer.load_manifest(tmp_path / "o")
    assert manifest["classes"] == ["-1", "5", "10"]
    labels.write_text("img0.jpg,0\nimg1.jpg,5\nimg2.jpg,10\nimg3.jpg,5\n")  # kept as ids
    run("pack", flat, "--labels", labels, "-o", tmp_path / "p", "-q")
    assert packer.load_manifest(tmp_path / "p")["classes"][10] == "10"


def test_a_labels_csv_in_the_folder_is_found_used_and_said(flat, tmp_path):
    (flat / "labels.csv").write_text("filename,label\nimg0.jpg,cat\nimg1.jpg,dog\n"
                                     "img2.jpg,cat\nimg3.jpg,dog\n")
    result = run("pack", flat, "-o", tmp_path / "o")
    manifest = packer.load_manifest(tmp_path / "o")
    assert manifest["count"] == 4 and "labels.csv" not in manifest["fields"]
    assert classes_of(tmp_path / "o") == {"cat": 2, "dog": 2}
    assert "labels: labels.csv (2 classes); found at the top of the folder" in result.output
    assert {"path": "labels.csv", "reason": "the labels file"} in manifest["ignored"]
    run("pack", flat, "-o", tmp_path / "u", "--unlabelled", "-q")
    assert packer.load_manifest(tmp_path / "u")["count"] == 5  # the CSV is a file then


def test_labels_paths_resolve_from_the_current_folder_then_from_source(flat, tmp_path,
                                                                        monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    (flat / "classes.csv").write_text("img0.jpg,a\nimg1.jpg,b\nimg2.jpg,a\nimg3.jpg,b\n")
    run("pack", flat, "--labels", "classes.csv", "-o", tmp_path / "o", "-q")
    assert classes_of(tmp_path / "o") == {"a": 2, "b": 2}
    (elsewhere / "classes.csv").write_text("img0.jpg,x\nimg1.jpg,x\nimg2.jpg,x\nimg3.jpg,x\n")
    run("pack", flat, "--labels", "classes.csv", "-o", tmp_path / "p", "-q")
    assert classes_of(tmp_path / "p") == {"x": 4}  # the current folder's comes first
    result = run("pack", flat, "--labels", "nope.csv", "-o", tmp_path / "q", expect=2)
    assert f"--labels nope.csv: no such file in the current folder ({elsewhere}) or in {flat}" \
        in result.output


def test_a_labels_csv_in_the_folder_that_cannot_be_read_says_what_to_do(flat, tmp_path):
    (flat / "labels.csv").write_text("img0.jpg\n")
    result = run("pack", flat, "-o", tmp_path / "o", expect=1)
    assert "labels.csv, line 1: expected 'filename,label'" in result.output
    assert "--unlabelled to pack it as a file" in result.output
