"""A source whose top holds split folders (train/, val/, test/ ...): they are the splits,
the class folders below them the classes; notes beside them leave the layout as it is;
the training copy is the one --dedupe keeps; folders that look like one split are noted."""

import shutil

import pytest

import packer
from conftest import image_bytes, run
from packer.errors import DatasetError
from packer.formats import FORMAT_NAMES

SPLIT = "train=0.8,val=0.1,test=0.1"


def keys_of(path, split):
    return sorted(s["__key__"] for s in packer.open_dataset(path, split=split, decode="raw"))


def split_folders(root):
    """train/ val/ test/ with class folders below; test/cat/x.jpg repeats train/dog/0.jpg."""
    for split, n in (("train", 6), ("val", 2), ("test", 2)):
        for c, name in enumerate(("cat", "dog")):
            (root / split / name).mkdir(parents=True)
            for i in range(n):
                seed = {"train": 0, "val": 1000, "test": 2000}[split] + 100 * c + i
                (root / split / name / f"{i}.jpg").write_bytes(image_bytes(seed))
    shutil.copy(root / "train" / "dog" / "0.jpg", root / "test" / "cat" / "x.jpg")
    return root


def test_notes_beside_the_split_or_class_folders_leave_the_layout_as_it_is(tmp_path):
    """A README, a LICENSE or a .md page at the top is no sample: the split folders stay
    the splits, class folders the classes, and the notes are listed as ignored."""
    source = split_folders(tmp_path / "src")
    (source / "README.md").write_text("where these images come from")
    (source / "LICENSE").write_text("CC-BY 4.0")
    text = run("pack", source, "-o", tmp_path / "out").output
    manifest = packer.load_manifest(tmp_path / "out")
    assert list(manifest["splits"]["sets"]) == ["train", "val", "test"]
    assert manifest["count"] == 21 and manifest["classes"] == ["cat", "dog"]
    assert {e["path"] for e in manifest["ignored"]} == {"README.md", "LICENSE"}
    assert "ignored LICENSE, README.md (a note beside the folders, not a sample)" in text
    classes = tmp_path / "classes"
    shutil.copytree(source / "train", classes)
    (classes / "README.txt").write_text("two cats, two dogs")
    (classes / "notes.pdf").write_bytes(b"%PDF-1.4")
    run("pack", classes, "-o", tmp_path / "c1", "-q")
    assert packer.load_manifest(tmp_path / "c1")["classes"] == ["cat", "dog"]
    (classes / "stray.jpg").write_bytes(image_bytes(7))  # a sample at the top: no layout
    assert "labels: none" in run("pack", classes, "-o", tmp_path / "c2").output


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_split_folders_are_the_splits_and_classes_come_from_below(fmt, tmp_path):
    source = split_folders(tmp_path / "src")
    out = tmp_path / "out"
    text = run("pack", source, "-o", out, "--to", fmt, "-q").output
    manifest = packer.load_manifest(out)
    assert manifest["classes"] == ["cat", "dog"] and manifest["class_counts"] == [11, 10]
    sets = manifest["splits"]["sets"]
    assert list(sets) == ["train", "val", "test"] and manifest["splits"]["method"] == "folders"
    assert [sets[name]["count"] for name in sets] == [12, 4, 5]
    assert sets["test"]["class_counts"] == [3, 2]
    assert "OK" in run("verify", out, "--against", source, "-q").output
    assert keys_of(out, "val") == ["val/cat/0", "val/cat/1", "val/dog/0", "val/dog/1"]
    assert all(s["cls"] == (s["__key__"].split("/")[1] == "dog")
               for s in packer.open_dataset(out, split="test", decode="raw"))
    assert "train/dog/0 (train) = test/cat/x (test)" in text
    refused = run("pack", source, "-o", tmp_path / "again", "--split", SPLIT, expect=2)
    assert "is split already, by its folders" in refused.output


def test_probed_edges_of_split_folders(tmp_path):
    source = split_folders(tmp_path / "src")
    (source / "val" / "dog" / "stray").mkdir()  # an empty class folder, fine
    (source / "train" / "notes.txt").write_text("beside the class folders")
    shutil.rmtree(source / "test")
    (source / "test").mkdir()  # an empty split folder keeps the labels
    out = tmp_path / "out"
    text = run("pack", source, "-o", out, "--dedupe", "-q").output
    manifest = packer.load_manifest(out)
    assert manifest["classes"] == ["cat", "dog"]
    assert {"path": "train/notes.txt", "reason": "directly in the split folder train/, so in "
            "no class (the classes are the folders below the split folders)"} in manifest["skipped"]
    assert manifest["splits"]["sets"]["test"]["count"] == 0
    assert "note: split test holds no sample" in text
    unlabelled = run("pack", source, "-o", tmp_path / "u", "--unlabelled", "-q").output
    assert "splits: train 13, val 4, test 0 (by the source's folders)" in unlabelled
    with pytest.raises(DatasetError, match="no split ''"):
        packer.open_dataset(out, split="")


def test_dedupe_keeps_the_training_copy_of_a_test_image(tmp_path):
    source = split_folders(tmp_path / "src")  # test/cat/x.jpg repeats train/dog/0.jpg
    run("pack", source, "-o", tmp_path / "out", "--dedupe", "-q")
    skipped = packer.load_manifest(tmp_path / "out")["skipped"]
    assert skipped == [{"path": "test/cat/x.jpg", "reason": "an exact duplicate of "
                        "train/dog/0.jpg, which has another label (--dedupe)"}]


def test_split_folders_that_look_like_one_split_are_noted(tmp_path):
    source = tmp_path / "src"
    for split in ("train", "Train", "val", "valid"):
        (source / split / "cat").mkdir(parents=True)
        (source / split / "cat" / f"{split}.jpg").write_bytes(image_bytes(len(split) + 7 * (
            split == "Train")))
    text = run("pack", source, "-o", tmp_path / "out", "-q").output
    assert "the split folders Train and train differ only in case" in text
    assert "the split folders val, valid all hold validation samples" in text
    state = packer.open_dataset(tmp_path / "out", split="val", decode="raw").state_dict()
    with pytest.raises(ValueError, match="this one has split 'valid', "):
        packer.open_dataset(tmp_path / "out", split="valid", decode="raw").load_state_dict(state)
