"""Pack, then read back with the plain third-party libraries and with `unpack`."""

import json
import tarfile

import h5py
import lmdb
import msgpack
import numpy as np
import pytest
import webdataset

import packer
from conftest import run, source_files
from packer.formats import FORMAT_NAMES
from packer.read.dataset import iter_samples
from packer.sample import restored_path


def plain_read(fmt: str, out) -> list[dict]:
    """Samples as {key, field: bytes, cls: int}, read without packer."""
    if fmt == "webdataset":
        shards = sorted(str(p) for p in out.glob("shard-*.tar"))
        samples = []
        for s in webdataset.WebDataset(shards, shardshuffle=False):
            fields = {k: v for k, v in s.items() if not k.startswith("__")}
            fields["cls"] = int(fields["cls"])
            samples.append({"__key__": s["__key__"], **fields})
        return samples
    if fmt == "lmdb":
        with lmdb.open(str(out), readonly=True, lock=False) as env, env.begin() as txn:
            meta = json.loads(txn.get(b"__meta__"))
            return [msgpack.unpackb(txn.get(b"%010d" % i)) for i in range(meta["count"])]
    if fmt == "tfrecord":
        return tfrecord_read(out)
    with h5py.File(out, "r") as f:
        fields = [n for n in f if n not in ("__key__", "cls")]
        samples = []
        for i, key in enumerate(f["__key__"].asstr()[:]):
            sample = {"__key__": key, "cls": int(f["cls"][i])}
            sample.update({n: f[n][i].tobytes() for n in fields if f[n][i].size})
            samples.append(sample)
        return samples


def tfrecord_read(out) -> list[dict]:
    """Samples read by the `tfrecord` package, part by part through each part's index
    (a bytes feature of one value comes back as bytes, an int64 one as an int64 array)."""
    from tfrecord.reader import tfrecord_loader

    samples = []
    for part in sorted(out.glob("part-*.tfrecord")):
        for record in tfrecord_loader(str(part), str(part.with_suffix(".tfindex")),
                                      shard=(0, 1)):
            sample = {"__key__": record.pop("__key__").decode()}
            sample.update((name, value if type(value) is bytes else int(value[0]))
                          for name, value in record.items())
            samples.append(sample)
    return samples


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_round_trip_with_plain_libraries_and_unpack(fmt, image_folder, tmp_path):
    out = tmp_path / "packed"
    run("pack", image_folder, "--to", fmt, "-o", out, "-q")
    source = source_files(image_folder)
    manifest = packer.load_manifest(out)
    classes = manifest["classes"]
    assert classes == ["bird", "cat", "dog"]

    samples = plain_read(fmt, out)
    packed = {}
    for sample in samples:
        for field, value in sample.items():
            if field not in ("__key__", "cls"):
                path = restored_path(sample["__key__"], field)
                packed[path] = value
                assert classes[sample["cls"]] == path.split("/")[0]
    assert packed == source  # every file, bit for bit, under its original path
    assert len(samples) == manifest["count"] == len({s["__key__"] for s in samples})
    assert sum(manifest["class_counts"]) == manifest["count"]

    restored = tmp_path / "restored"
    run("unpack", out, "-o", restored, "-q")
    assert source_files(restored) == source
    assert "OK" in run("verify", out, "--against", image_folder, "-q").output


def test_formats_read_back_identical(image_folder, tmp_path):
    packed = {}
    for fmt in FORMAT_NAMES:
        run("pack", image_folder, "--to", fmt, "-o", tmp_path / fmt, "-q")
        packed[fmt] = list(iter_samples(tmp_path / fmt))
        manifest = packer.load_manifest(tmp_path / fmt)
        packed[fmt + " digests"] = [p.get("samples_sha256") for p in manifest["parts"]]
    assert packed["webdataset"] == packed["lmdb"] == packed["hdf5"] == packed["tfrecord"]
    assert packed["lmdb digests"] == packed["hdf5 digests"] != [None]


def test_tar_shards_list_with_tar_and_respect_the_limits(image_folder, tmp_path):
    out = tmp_path / "wds"
    run("pack", image_folder, "-o", out, "--max-count", "4", "-q")
    manifest = packer.load_manifest(out)
    assert len(manifest["parts"]) == -(-manifest["count"] // 4)
    for part in manifest["parts"]:
        with tarfile.open(out / part["name"]) as tar:
            keys = {m.name.split(".")[0] for m in tar.getmembers()}
        assert len(keys) == part["count"] <= 4
        assert (out / part["name"]).stat().st_size == part["bytes"]
    run("pack", image_folder, "-o", tmp_path / "small", "--shard-size", "12KB", "-q")
    sizes = [p.stat().st_size for p in (tmp_path / "small").glob("*.tar")]
    assert len(sizes) > 3 and max(sizes) <= 12000


def test_labels_file_for_a_flat_folder(tmp_path):
    from conftest import image_bytes

    root = tmp_path / "flat"
    root.mkdir()
    for i in range(6):
        (root / f"img{i}.png").write_bytes(image_bytes(i, "PNG"))
    (root / "labels.csv").write_text("filename,label\n" + "".join(
        f"img{i}.png,{'cat' if i % 2 else 'dog'}\n" for i in range(5)) + "gone.png,cat\n")
    out = tmp_path / "flat.lmdb"
    result = run("pack", root, "--labels", root / "labels.csv", "--to", "lmdb", "-o", out, "-q")
    assert "1 row of the labels file names no file: gone.png" in result.output
    manifest = packer.load_manifest(out)
    assert manifest["classes"] == ["cat", "dog"] and manifest["class_counts"] == [2, 3]
    assert manifest["skipped"] == [{"path": "img5.png", "reason": "no label in labels.csv"}]
    labels = {s["__key__"]: s["cls"] for s in iter_samples(out)}
    assert labels == {"img0": 1, "img1": 0, "img2": 1, "img3": 0, "img4": 1}
    run("unpack", out, "-o", tmp_path / "back", "-q")
    assert (tmp_path / "back" / "labels.csv").read_text().splitlines()[1] == "img0.png,dog"


def test_unlabelled_and_group_by_stem(tmp_path):
    from conftest import image_bytes

    root = tmp_path / "pairs"
    (root / "a").mkdir(parents=True)
    for i in range(3):
        (root / "a" / f"x{i}.jpg").write_bytes(image_bytes(i))
        (root / "a" / f"x{i}.png").write_bytes(image_bytes(i, "PNG"))
    out = tmp_path / "separate"
    result = run("pack", root, "--unlabelled", "-o", out, "--to", "hdf5", "-q")
    assert "3 stems are shared by several files" in result.output
    samples = list(iter_samples(out))
    assert len(samples) == 6 and all("cls" not in s for s in samples)
    run("pack", root, "--unlabelled", "--group-by-stem", "-o", tmp_path / "grouped", "-q")
    grouped = list(iter_samples(tmp_path / "grouped"))
    assert [sorted(s) for s in grouped] == [["__key__", "jpg", "png"]] * 3
    assert np.frombuffer(grouped[0]["png"], np.uint8).size > 0


def test_lmdb_map_grows_past_a_small_start(image_folder, tmp_path, monkeypatch):
    monkeypatch.setattr("packer.formats.lmdb.initial_map_size", lambda input_bytes: 32 << 10)
    out = tmp_path / "grown.lmdb"
    run("pack", image_folder, "--to", "lmdb", "-o", out, "-q")
    env = lmdb.open(str(out), readonly=True, lock=False)
    assert env.info()["map_size"] > 32 << 10
    env.close()
    assert "OK" in run("verify", out, "--against", image_folder, "-q").output


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_cls_sidecars_of_an_unlabelled_folder_are_carried(fmt, tmp_path):
    from conftest import image_bytes

    source = tmp_path / "flat"
    source.mkdir()
    for i in range(3):
        (source / f"img{i}.jpg").write_bytes(image_bytes(i))
    (source / "img1.cls").write_bytes(b"3\n")
    run("pack", source, "--to", fmt, "-o", tmp_path / "out", "-q")
    samples = {s["__key__"]: s for s in iter_samples(tmp_path / "out")}
    assert samples["img1"]["cls"] == b"3\n" and "cls" not in samples["img0"]
    run("unpack", tmp_path / "out", "-o", tmp_path / "back", "-q")
    assert source_files(tmp_path / "back") == source_files(source)
