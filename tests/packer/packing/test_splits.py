"""Splits made at pack time: stratified shares, groups kept whole, split folders, the
leakage check, --dedupe, and every reader seeing the same split."""

import json
import shutil
import signal
import subprocess
import sys
import tarfile

import numpy as np
import pytest

import packer
from conftest import KILL_AFTER_TWO_PARTS, class_images, image_bytes, run
from packer.errors import DatasetError
from packer.packing.splits import assign_ratios
from packer.read.dataset import iter_samples

SHARES = {"train": 0.8, "val": 0.1, "test": 0.1}
SPLIT = "train=0.8,val=0.1,test=0.1"


def keys_of(path, split):
    return sorted(s["__key__"] for s in packer.open_dataset(path, split=split, decode="raw"))


def imbalanced(root):
    """Ten classes, one of them rare (10 samples against 100)."""
    for c in range(10):
        n = 10 if c == 3 else 100
        (root / f"c{c}").mkdir(parents=True)
        for i in range(n):
            (root / f"c{c}" / f"{i:03d}.jpg").write_bytes(image_bytes(c * 1000 + i))
    return root


def test_stratified_shares_hold_within_one_sample_per_class():
    labels = np.repeat(np.arange(10), [10 if c == 3 else 97 for c in range(10)])
    split = assign_ratios(len(labels), SHARES, seed=4, labels=labels)
    for c in range(10):
        members = split[labels == c]
        for number, share in enumerate(SHARES.values()):
            assert abs((members == number).sum() - share * len(members)) < 1
    for number, share in enumerate(SHARES.values()):
        assert abs((split == number).sum() - share * len(labels)) < 1


def test_pack_split_is_stratified_seeded_and_read_by_name(tmp_path):
    source = imbalanced(tmp_path / "src")
    run("pack", source, "-o", tmp_path / "a", "--split", SPLIT, "-q")
    run("pack", source, "-o", tmp_path / "b", "--split", SPLIT, "-q")
    run("pack", source, "-o", tmp_path / "c", "--split", SPLIT, "--split-seed", "1", "-q")
    manifest = packer.load_manifest(tmp_path / "a")
    sets = manifest["splits"]["sets"]
    assert [sets[name]["count"] for name in SHARES] == [728, 91, 91]
    assert sets["val"]["class_counts"][3] == 1 and sets["test"]["class_counts"][3] == 1
    assert manifest["splits"]["stratified"] and manifest["splits"]["leak_count"] == 0
    same = packer.load_manifest(tmp_path / "b")["splits"]["sets"]
    other = packer.load_manifest(tmp_path / "c")["splits"]["sets"]
    assert same == sets and other["val"]["ranges"] != sets["val"]["ranges"]

    by_split = {name: keys_of(tmp_path / "a", name) for name in SHARES}
    assert sum(map(len, by_split.values())) == 910
    assert len(set().union(*by_split.values())) == 910  # disjoint, and every sample once
    info = packer.dataset_info(tmp_path / "a")
    assert info["splits"]["sets"]["val"]["classes"]["c3"] == 1
    text = run("inspect", tmp_path / "a").output
    assert ("splits: train 728, val 91, test 91 (train=0.8, val=0.1, test=0.1; stratified by "
            "class, seed 0)") in text
    assert "c3: 10  (train 8, val 1, test 1)" in text


def test_split_by_folder_keeps_each_group_in_one_split(tmp_path):
    source = tmp_path / "scans"
    for patient in range(20):
        folder = source / f"p{patient:02d}"
        folder.mkdir(parents=True)
        for i in range(1 + patient % 4):
            (folder / f"{i}.png").write_bytes(image_bytes(patient * 10 + i, "PNG"))
    run("pack", source, "-o", tmp_path / "out", "--split", "train=0.7,val=0.3",
        "--split-by", "folder:1", "--unlabelled", "-q")
    groups = {name: {key.split("/")[0] for key in keys_of(tmp_path / "out", name)}
              for name in ("train", "val")}
    assert groups["train"] and groups["val"] and not groups["train"] & groups["val"]
    assert len(groups["train"] | groups["val"]) == 20
    splits = packer.load_manifest(tmp_path / "out")["splits"]
    assert splits["by"] == "folder:1" and not splits["stratified"]


def planted_duplicates(root):
    """3 classes of 20; c1/dup.jpg repeats c0/000.jpg, c2/000.jpg and c2/copy.jpg are one."""
    class_images(root, 3, 20)
    shutil.copy(root / "c0" / "000.jpg", root / "c1" / "dup.jpg")
    shutil.copy(root / "c2" / "000.jpg", root / "c2" / "copy.jpg")
    return root


def test_a_duplicate_across_splits_is_reported_by_pack_inspect_and_verify(tmp_path):
    source = planted_duplicates(tmp_path / "src")
    for seed in range(20):  # a seed that puts the planted pair in two splits
        out = tmp_path / f"s{seed}"
        text = run("pack", source, "-o", out, "--split", "train=0.5,val=0.5", "--split-seed",
                   seed, "-q").output
        leaks = packer.load_manifest(out)["splits"]["leaks"]
        if any(set(leak["keys"]) == {"train", "val"} and "c1/dup" in str(leak) for leak in leaks):
            break
    else:
        pytest.fail("no seed split the planted duplicates")
    assert "leak:" in text and "c1/dup" in text and "c0/000" in text
    assert "leak:" in run("inspect", out).output
    report = json.loads(run("verify", out, "--json").output)
    assert report["ok"] and report["leak_count"] == len(leaks) >= 1
    assert report["leaks"] == leaks
    assert "c1/dup" in run("verify", out).output


def test_dedupe_stores_each_content_once_and_lists_the_rest(tmp_path):
    source = planted_duplicates(tmp_path / "src")
    out = tmp_path / "out"
    run("pack", source, "-o", out, "--split", SPLIT, "--dedupe", "--to", "lmdb", "-q")
    manifest = packer.load_manifest(out)
    assert manifest["count"] == 60 and manifest["splits"]["leak_count"] == 0
    skipped = {entry["path"]: entry["reason"] for entry in manifest["skipped"]}
    assert skipped == {
        "c1/dup.jpg": "an exact duplicate of c0/000.jpg, which has another label (--dedupe)",
        "c2/copy.jpg": "an exact duplicate of c2/000.jpg (--dedupe)"}
    assert "OK" in run("verify", out, "--against", source, "-q").output
    assert sum(len(keys_of(out, name)) for name in SHARES) == 60


def test_dedupe_without_split_drops_duplicates(tmp_path):
    source = planted_duplicates(tmp_path / "src")
    run("pack", source, "-o", tmp_path / "out", "--dedupe", "-q")
    manifest = packer.load_manifest(tmp_path / "out")
    assert manifest["count"] == 60 and "splits" not in manifest
    assert len(manifest["skipped"]) == 2


def test_a_plain_reader_finds_each_split_from_the_manifest(tmp_path):
    source = imbalanced(tmp_path / "src")
    out = tmp_path / "out"
    run("pack", source, "-o", out, "--split", SPLIT, "--max-count", "100", "-q")
    manifest = json.loads((out / "manifest.json").read_text())
    keys = []  # sample i is the i-th in the shards, in the manifest's order
    for part in manifest["parts"]:
        with tarfile.open(out / part["name"]) as tar:
            keys += list(dict.fromkeys(m.name.split(".")[0] for m in tar.getmembers()))
    val = [keys[i] for first, stop in manifest["splits"]["sets"]["val"]["ranges"]
           for i in range(first, stop)]
    assert sorted(val) == keys_of(out, "val")


@pytest.mark.parametrize("fmt", ["webdataset", "hdf5"])
def test_a_killed_split_pack_resumes_to_the_same_splits(fmt, tmp_path):
    source = planted_duplicates(tmp_path / "src")
    out = tmp_path / "killed"
    args = ["pack", str(source), "--to", fmt, "-o", str(out), "--max-count", "3", "-q",
            "--split", SPLIT, "--dedupe"]
    killed = subprocess.run([sys.executable, "-c", KILL_AFTER_TWO_PARTS, *args])
    assert killed.returncode == -signal.SIGKILL and not out.exists()
    assert list((tmp_path / "killed.partial" / "samples").iterdir())
    run(*args, "--resume")
    reference = tmp_path / "reference"
    run("pack", source, "--to", fmt, "-o", reference, "--max-count", "3", "-q", "--split",
        SPLIT, "--dedupe")
    resumed, expected = packer.load_manifest(out), packer.load_manifest(reference)
    assert resumed["splits"] == expected["splits"]
    assert resumed["skipped"] == expected["skipped"] and resumed["count"] == 60
    assert list(iter_samples(out)) == list(iter_samples(reference))
    assert not (out / "samples").exists()


KILL_AFTER_THE_LOG_IS_REMOVED = """
import os, signal, sys
import packer.packing.sample_log as log
remove = log.SampleLog.remove
def remove_then_die(self):
    remove(self)
    os.kill(os.getpid(), signal.SIGKILL)
log.SampleLog.remove = remove_then_die
from packer.cli import cli
cli(sys.argv[1:], prog_name="packer")
"""


def test_a_pack_killed_as_it_publishes_resumes(tmp_path):
    source = class_images(tmp_path / "src", 2, 10)
    args = ["pack", str(source), "-o", str(tmp_path / "out"), "--max-count", "4", "-q",
            "--split", "train=0.5,val=0.5"]
    killed = subprocess.run([sys.executable, "-c", KILL_AFTER_THE_LOG_IS_REMOVED, *args])
    assert killed.returncode == -signal.SIGKILL and not (tmp_path / "out").exists()
    run(*args, "--resume")
    assert packer.load_manifest(tmp_path / "out")["splits"]["sets"]["val"]["count"] == 10


def test_a_damaged_sample_log_is_one_message_when_the_pack_resumes(tmp_path):
    source = class_images(tmp_path / "src", 2, 10)
    args = ["pack", str(source), "-o", str(tmp_path / "out"), "--max-count", "3", "-q",
            "--split", "train=0.5,val=0.5"]
    subprocess.run([sys.executable, "-c", KILL_AFTER_TWO_PARTS, *args])
    (tmp_path / "out.partial" / "samples" / "part-000000.json").write_text('{"keys": [')
    said = run(*args, "--resume", expect=2).output
    assert "part-000000.json: the log of the samples of part 0 is missing or damaged" in said
    assert "--overwrite" in said and "Traceback" not in said


def test_bad_split_options_are_refused_before_reading(tmp_path):
    source = class_images(tmp_path / "src", 2, 3)
    table = tmp_path / "t.csv"
    table.write_text("a,y\n" + "".join(f"{i},{i % 2}\n" for i in range(10)))
    for args, said in [
        (["--split", "train=0.8,val=0.3"], "add up to 1.1, not 1"),
        (["--split", "train=0.8,train=0.2"], "each name once"),
        (["--split", "train"], "NAME=SHARE pairs"),
        (["--split", SPLIT, "--split-by", "patient"], "give folder:N"),
        (["--split-by", "folder:1"], "--split-by (only with --split)"),
    ]:
        assert said in run("pack", source, "-o", tmp_path / "x", *args, expect=2).output
    refused = run("pack", table, "--label-column", "y", "-o", tmp_path / "t", "--split", SPLIT,
                  "--split-by", "folder:1", expect=2)
    assert "--split-by (only for folders" in refused.output
    assert not (tmp_path / "x").exists()


def test_a_table_splits_into_hdf5_and_each_split_reads_back(tmp_path):
    table = tmp_path / "t.csv"
    table.write_text("a,b,y\n" + "".join(f"{i},{i % 7},{i % 3}\n" for i in range(200)))
    out = tmp_path / "t.h5"
    run("pack", table, "--label-column", "y", "--to", "hdf5", "-o", out, "--split",
        "train=0.75,test=0.25", "-q")
    sets = packer.load_manifest(out)["splits"]["sets"]
    assert [sets[n]["count"] for n in sets] == [150, 50]
    rows = [s for s in packer.open_dataset(out, split="test", decode="raw")]
    assert len(rows) == 50 and sorted(np.bincount([int(r["cls"]) for r in rows])) == [16, 17, 17]
    assert "OK" in run("verify", out, "--against", table, "-q").output


def test_asking_for_a_split_that_is_not_there_names_those_that_are(tmp_path):
    source = class_images(tmp_path / "src", 2, 5)
    run("pack", source, "-o", tmp_path / "plain", "-q")
    run("pack", source, "-o", tmp_path / "split", "--split", "train=0.6,val=0.4", "-q")
    with pytest.raises(DatasetError, match="packed without splits; `packer pack --split"):
        packer.open_dataset(tmp_path / "plain", split="val")
    with pytest.raises(DatasetError, match="no split 'test'; its splits are 'train', 'val'"):
        packer.open_dataset(tmp_path / "split", split="test")


def test_a_manifest_whose_splits_overlap_is_refused(tmp_path):
    source = class_images(tmp_path / "src", 2, 5)
    out = tmp_path / "out"
    run("pack", source, "-o", out, "--split", "train=0.6,val=0.4", "-q")
    path = out / "manifest.json"
    manifest = json.loads(path.read_text())
    val = manifest["splits"]["sets"]["val"]
    next(r for r in val["ranges"] if r[0] > 0)[0] -= 1  # now over a sample of train's
    val["count"] += 1
    path.write_text(json.dumps(manifest))
    with pytest.raises(DatasetError, match="overlaps another or lies outside"):
        packer.open_dataset(out, split="val")


def test_one_content_whatever_its_name_class_or_notes():
    from packer.sample import content_digest

    photo = {"__key__": "a/1", "jpg": b"\xff\xd8 pixels", "cls": 0}
    assert content_digest(photo) == content_digest({"__key__": "b/2", "jpeg": b"\xff\xd8 pixels",
                                                    "json": b'{"by": "x"}', "cls": 1})
    assert content_digest(photo) != content_digest({**photo, "png": b"a mask"})
    notes = {"__key__": "n", "json": b"{}"}  # a sample of notes only is its notes
    assert content_digest(notes) != content_digest({"__key__": "m", "json": b"[]"})


def test_few_groups_still_reach_every_split_and_small_classes_stay_within_one():
    groups = ["a"] * 100 + ["b"] * 100 + ["c"] * 100
    split = assign_ratios(300, SHARES, seed=0, groups=groups)
    assert sorted(np.bincount(split, minlength=3)) == [100, 100, 100]
    labels = np.array([0] * 7 + [1] * 6)
    split = assign_ratios(13, SHARES, seed=0, labels=labels)
    for c in (0, 1):
        for number, share in enumerate(SHARES.values()):
            assert abs((split[labels == c] == number).sum() - share * (labels == c).sum()) < 1


def test_damaged_split_fields_are_one_message(tmp_path):
    source = class_images(tmp_path / "src", 3, 4)
    out = tmp_path / "out"
    run("pack", source, "-o", out, "--split", "train=0.5,val=0.5", "-q")
    path = out / "manifest.json"
    good = json.loads(path.read_text())
    for damage, said in [
        (lambda m: m["splits"]["sets"]["val"].update(class_counts=[1, 2]), "2 class counts"),
        (lambda m: m["splits"].update(leaks=[{"sha256": "x", "keys": 5}]), "is not of type"),
    ]:
        manifest = json.loads(json.dumps(good))
        damage(manifest)
        path.write_text(json.dumps(manifest))
        for command in (["inspect", out], ["view", out, "-o", tmp_path / "v.html", "-q"]):
            output = run(*command, expect=1).output
            assert "the manifest is damaged" in output and said in output


def test_an_append_never_leaves_samples_outside_the_splits(tmp_path):
    source = class_images(tmp_path / "src", 2, 5)
    more = class_images(tmp_path / "more", 2, 2)
    run("pack", source, "-o", tmp_path / "split", "--split", "train=0.6,val=0.4", "-q")
    run("pack", source, "-o", tmp_path / "plain", "-q")
    said = run("pack", more, "--append", tmp_path / "split", "-q", expect=2).output
    assert "its samples were split when packed (train, val)" in said
    said = run("pack", more, "--append", tmp_path / "plain", "--dedupe", "-q", expect=2).output
    assert "an append adds samples to no split" in said
    assert packer.load_manifest(tmp_path / "plain")["count"] == 10


