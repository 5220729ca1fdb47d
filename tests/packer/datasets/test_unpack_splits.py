"""Unpacking a split dataset: a folder per split, which `packer pack` reads back into the
same splits with the same samples; --no-splits, names pack would not read as splits,
and a manifest that leaves samples in no split."""

import json

import pytest

import packer
from conftest import image_bytes, run
from packer.manifest import MANIFEST_NAME

SPLIT = "train=0.6,val=0.2,test=0.2"


def class_folders(root):
    for i in range(15):
        folder = root / ("cat", "dog")[i % 2]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{i:02d}.jpg").write_bytes(image_bytes(i))
    return root


def labels_file(root):
    """Flat files, their classes in a labels.csv at the top."""
    root.mkdir()
    rows = ["filename,label"]
    for i in range(10):
        (root / f"{i:02d}.jpg").write_bytes(image_bytes(100 + i))
        rows.append(f"{i:02d}.jpg,{('cat', 'dog')[i % 3 == 0]}")
    (root / "labels.csv").write_text("\n".join(rows) + "\n")
    return root


def split_folders(root):
    """train/ val/ test/ with class folders; test/ left empty."""
    for split, count in (("train", 4), ("val", 2)):
        for c, name in enumerate(("cat", "dog")):
            (root / split / name).mkdir(parents=True)
            for i in range(count):
                (root / split / name / f"{i}.jpg").write_bytes(image_bytes(200 + 10 * c + i))
    (root / "test").mkdir()
    return root


def by_split(path) -> dict[str, dict[str, tuple]]:
    """Per split: each key's label name and the bytes of its fields."""
    manifest = packer.load_manifest(path)
    classes = manifest.get("classes") or []
    found = {}
    for name in manifest["splits"]["sets"]:
        found[name] = {s["__key__"]: (classes[s["cls"]] if "cls" in s else None,
                                      {f: v for f, v in s.items() if f not in ("__key__", "cls")})
                       for s in packer.open_dataset(path, split=name, decode="raw")}
    return found


@pytest.mark.parametrize("make, split", [(class_folders, SPLIT), (labels_file, SPLIT),
                                         (split_folders, None)])
def test_a_split_dataset_unpacks_to_split_folders_that_pack_back_into_its_splits(
        make, split, tmp_path):
    source = make(tmp_path / "src")
    run("pack", source, "-o", tmp_path / "packed", *(["--split", split] if split else []), "-q")
    result = json.loads(run("unpack", tmp_path / "packed", "-o", tmp_path / "un", "-q",
                            "--json").output)
    before = by_split(tmp_path / "packed")
    assert result["splits"] == {name: len(keys) for name, keys in before.items()}
    assert result["splits_note"] is None
    assert {p.name for p in (tmp_path / "un").iterdir() if p.is_dir()} == set(before)
    run("pack", tmp_path / "un", "-o", tmp_path / "again", "-q")
    after = by_split(tmp_path / "again")
    assert list(after) == list(before)
    prefix = (lambda name: f"{name}/") if split else (lambda name: "")
    for name, samples in before.items():  # a key gains its split folder where it had none
        assert after[name] == {prefix(name) + key: value for key, value in samples.items()}
    text = run("unpack", tmp_path / "packed", "-o", tmp_path / "un", "--overwrite").output
    counts = ", ".join(f"{name}/ {len(keys)}" for name, keys in before.items())
    assert f"splits: {counts} (a folder each" in text


def test_no_splits_writes_every_sample_under_its_own_path(tmp_path):
    source = class_folders(tmp_path / "src")
    run("pack", source, "-o", tmp_path / "packed", "--split", SPLIT, "-q")
    text = run("unpack", tmp_path / "packed", "-o", tmp_path / "un", "--no-splits").output
    assert "note: --no-splits: the samples of the splits train, val, test are written" in text
    assert sorted(p.name for p in (tmp_path / "un").iterdir()) == [".packer-unpack.json",
                                                                   "cat", "dog"]
    again = run("pack", tmp_path / "un", "-o", tmp_path / "again", "--split", SPLIT).output
    assert "splits: train 9, val 3, test 3" in again


def test_split_names_that_pack_takes_for_classes_are_written_together(tmp_path):
    source = class_folders(tmp_path / "src")
    run("pack", source, "-o", tmp_path / "packed", "--split", "fit=0.5,holdout=0.5", "-q")
    result = json.loads(run("unpack", tmp_path / "packed", "-o", tmp_path / "un", "-q",
                            "--json").output)
    assert result["splits"] is None
    assert "the splits fit, holdout are written together, not as folders" in \
        result["splits_note"]
    assert (tmp_path / "un" / "cat" / "00.jpg").read_bytes() == image_bytes(0)


def test_samples_in_no_split_stop_the_unpack_and_no_splits_writes_them(tmp_path):
    """A pack splits every sample it stores (--dedupe drops before splitting, an append
    refuses a split dataset), but a manifest may leave a gap."""
    source = class_folders(tmp_path / "src")
    run("pack", source, "-o", tmp_path / "packed", "--split", SPLIT, "--dedupe", "-q")
    path = tmp_path / "packed" / MANIFEST_NAME
    manifest = json.loads(path.read_text())
    assert sum(s["count"] for s in manifest["splits"]["sets"].values()) == manifest["count"]
    test = manifest["splits"]["sets"]["test"]
    first, stop = test["ranges"].pop()
    test["count"] -= stop - first
    test["class_counts"] = None
    path.write_text(json.dumps(manifest))
    refused = run("unpack", tmp_path / "packed", "-o", tmp_path / "un", expect=1)
    assert f"{stop - first} samples are in no split (sample {first} the first)" in \
        refused.output and "--no-splits" in refused.output
    assert not (tmp_path / "un").exists()
    run("unpack", tmp_path / "packed", "-o", tmp_path / "un", "--no-splits", "-q")
    assert len(list((tmp_path / "un").rglob("*.jpg"))) == 15


def test_an_unlabelled_split_dataset_is_told_to_pack_back_unlabelled(tmp_path):
    source = tmp_path / "src"
    (source / "sub").mkdir(parents=True)
    for i, name in enumerate(("a.jpg", "b.jpg", "sub/c.jpg", "sub/d.jpg", "e.jpg")):
        (source / name).write_bytes(image_bytes(300 + i))
    run("pack", source, "-o", tmp_path / "packed", "--split", "train=0.5,test=0.5", "-q")
    text = run("unpack", tmp_path / "packed", "-o", tmp_path / "un").output
    assert "note: the samples have no labels: pack the output again with --unlabelled" in text
    again = run("pack", tmp_path / "un", "-o", tmp_path / "again", "--unlabelled").output
    before = packer.load_manifest(tmp_path / "packed")["splits"]["sets"]
    assert f"splits: train {before['train']['count']}, test {before['test']['count']}" in again
