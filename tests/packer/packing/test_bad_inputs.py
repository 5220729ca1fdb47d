"""Bad inputs are never dropped silently and never crash the run."""

import os

import pytest

import packer
from conftest import image_bytes, run
from packer.packing import pack
from packer.packing.options import PackOptions
from packer.read.dataset import iter_samples


@pytest.fixture
def messy_folder(tmp_path):
    root = tmp_path / "messy"
    good = root / "good"
    good.mkdir(parents=True)
    for i in range(4):
        (good / f"ok{i}.jpg").write_bytes(image_bytes(i))
    (good / "ok.png").write_bytes(image_bytes(9, "PNG"))
    jpeg, png = image_bytes(5), image_bytes(6, "PNG")
    bad = root / "bad"
    bad.mkdir()
    (bad / "empty.jpg").write_bytes(b"")
    (bad / "cut.jpg").write_bytes(jpeg[: len(jpeg) // 2])
    (bad / "cut.png").write_bytes(png[: len(png) - 20])
    (bad / "text.jpg").write_text("this is not an image")
    (bad / "broken.json").write_text("{not json")
    (bad / "link.jpg").symlink_to(tmp_path / "nowhere.jpg")
    (bad / "loop").symlink_to(root)
    (bad / ".DS_Store").write_bytes(b"junk")
    (bad / "Thumbs.db").write_bytes(b"junk")
    (bad / ".hidden.jpg").write_bytes(jpeg)
    return root


EXPECTED = {
    "bad/empty.jpg": "empty file",
    "bad/cut.jpg": "truncated JPEG",
    "bad/cut.png": "truncated PNG",
    "bad/text.jpg": "not a JPEG",
    "bad/broken.json": "invalid JSON",
    "bad/link.jpg": "broken symlink",
    "bad/loop": "symlink loop",
}


def test_every_bad_input_is_listed_with_its_reason(messy_folder, tmp_path):
    out = tmp_path / "out"
    result = run("pack", messy_folder, "-o", out, "-q")
    manifest = packer.load_manifest(out)
    reasons = {e["path"]: e["reason"] for e in manifest["skipped"]}
    assert set(reasons) == set(EXPECTED)
    for path, words in EXPECTED.items():
        assert words in reasons[path], (path, reasons[path])
        assert path in result.output
    assert f"skipped {len(EXPECTED)} inputs" in result.output
    assert {e["path"] for e in manifest["ignored"]} == {
        "bad/.DS_Store", "bad/Thumbs.db", "bad/.hidden.jpg"}
    assert "ignored 3 hidden or OS junk files" in result.output
    assert manifest["count"] == 5
    assert "symlinks:" not in result.output  # a broken link and a loop: none followed
    assert "OK" in run("verify", out, "--against", messy_folder, "-q").output


def test_decode_check_catches_what_the_header_check_misses(tmp_path):
    root = tmp_path / "d"
    root.mkdir()
    jpeg = bytearray(image_bytes(1, size=(64, 64)))
    sos = jpeg.rfind(b"\xff\xda")
    jpeg[sos + 2:sos + 12] = b"\xff\xc4" * 5  # a bad marker inside the scan data
    (root / "garbled.jpg").write_bytes(bytes(jpeg))
    (root / "fine.jpg").write_bytes(image_bytes(2))
    run("pack", root, "-o", tmp_path / "h", "-q")
    assert len(list(iter_samples(tmp_path / "h"))) == 2
    result = run("pack", root, "-o", tmp_path / "d2", "--check", "decode", "-q")
    assert "garbled.jpg: cannot decode the image" in result.output


def test_on_error_fail_names_the_file_and_leaves_nothing(messy_folder, tmp_path):
    out = tmp_path / "out"
    result = run("pack", messy_folder, "-o", out, "--on-error", "fail", expect=1)
    assert "broken symlink" in result.output or "bad/" in result.output
    assert str(messy_folder / "bad") in result.output
    assert not out.exists() and not (tmp_path / "out.partial").exists()


def test_no_follow_symlinks_lists_them(messy_folder, tmp_path):
    (messy_folder / "good" / "alias.jpg").symlink_to(messy_folder / "good" / "ok0.jpg")
    out = tmp_path / "out"
    result = run("pack", messy_folder, "-o", out, "--no-follow-symlinks", "-q")
    assert "not followed (--no-follow-symlinks)" in result.output
    reasons = {e["path"]: e["reason"] for e in packer.load_manifest(out)
               ["skipped"]}
    assert "not followed" in reasons["good/alias.jpg"]


def test_only_followed_symlinks_are_counted(messy_folder, tmp_path):
    (messy_folder / "good" / "alias.jpg").symlink_to(messy_folder / "good" / "ok0.jpg")
    result = run("pack", messy_folder, "-o", tmp_path / "out", "-q")
    assert "symlinks: 1 followed" in result.output


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file_is_skipped(tmp_path):
    root = tmp_path / "u"
    root.mkdir()
    (root / "a.jpg").write_bytes(image_bytes(1))
    (root / "b.jpg").write_bytes(image_bytes(2))
    (root / "b.jpg").chmod(0)
    manifest = pack(root, tmp_path / "o", PackOptions(progress=False))
    assert manifest["skipped"] == [{"path": "b.jpg", "reason": "cannot read: Permission denied"}]


def test_read_error_is_skipped(tmp_path, monkeypatch):
    root = tmp_path / "u"
    root.mkdir()
    (root / "a.jpg").write_bytes(image_bytes(1))
    (root / "b.jpg").write_bytes(image_bytes(2))
    from packer.sources.files.read import read_input

    def failing_read(path, field, check):
        if path.endswith("b.jpg"):
            raise PermissionError(13, "Permission denied")
        return read_input(path, field, check)

    monkeypatch.setattr("packer.sources.files.read.read_input", failing_read)
    manifest = pack(root, tmp_path / "o", PackOptions(progress=False))
    assert manifest["skipped"] == [{"path": "b.jpg", "reason": "cannot read: Permission denied"}]
    assert manifest["count"] == 1


def test_a_cls_file_clashing_with_folder_labels_is_listed(tmp_path):
    root = tmp_path / "c"
    (root / "cat").mkdir(parents=True)
    (root / "cat" / "a.jpg").write_bytes(image_bytes(1))
    (root / "cat" / "a.cls").write_text("7")
    manifest = pack(root, tmp_path / "o", PackOptions(progress=False))
    assert manifest["skipped"][0]["path"] == "cat/a.cls"
    assert [s["cls"] for s in iter_samples(tmp_path / "o")] == [0]


def test_a_folder_of_only_bad_inputs_is_an_error_that_says_why(tmp_path):
    source = tmp_path / "allbad"
    source.mkdir()
    (source / "zero.jpg").write_bytes(b"")
    (source / "text.jpg").write_text("hello")
    result = run("pack", source, "-o", tmp_path / "out", expect=1)
    assert "all 2 inputs were skipped" in result.output and "empty file" in result.output
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()


def test_a_jpeg_cut_after_its_thumbnail_is_truncated():
    from packer.sources.files.checks import check_file

    image = image_bytes(3)
    thumbnail = image  # an embedded thumbnail ends with its own FF D9
    whole = image[:2] + thumbnail[2:] + image[2:]  # thumbnail data, then the image's
    assert check_file("jpg", whole, "header") is None
    cut = whole[:-2]  # the last FF D9 left is the thumbnail's, before the image's scan
    assert "truncated JPEG" in check_file("jpg", cut, "header")


def test_an_output_in_missing_folders_makes_them(image_folder, tmp_path):
    out = tmp_path / "runs" / "week1" / "images-wds"
    run("pack", image_folder, "-o", out, "-q")
    assert packer.load_manifest(out)["count"] > 0
    (tmp_path / "a-file").write_text("not a folder")
    refused = run("pack", image_folder, "-o", tmp_path / "a-file" / "sub" / "o", expect=1)
    assert "cannot make the folder" in refused.output and "Traceback" not in refused.output
