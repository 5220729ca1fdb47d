"""The index packer saves beside each shard: used when it is the shard's, else ignored."""

import json
import shutil

import pytest

import packer
from conftest import image_bytes, run
from packer.formats.webdataset import tarindex


@pytest.fixture
def shards(tmp_path):
    images = tmp_path / "images"
    for c in range(2):
        (images / f"c{c}").mkdir(parents=True)
        for i in range(30):
            (images / f"c{c}" / f"{i:02d}.jpg").write_bytes(image_bytes(c * 40 + i))
    (images / "c0" / ("long-" + "x" * 120 + ".jpg")).write_bytes(image_bytes(99))
    (images / "c1" / "多.dots.ünï.jpg").write_bytes(image_bytes(98))  # a PAX header
    run("pack", images, "--to", "webdataset", "-o", tmp_path / "ds", "--max-count", "25", "-q")
    return tmp_path / "ds"


def _digests(folder):
    return [p["sha256"] for p in json.loads((folder / "manifest.json").read_text())["parts"]]


def test_every_shard_gets_an_index_equal_to_its_headers(shards):
    digests = _digests(shards)
    for number, digest in enumerate(digests):
        shard = str(shards / f"shard-{number:06d}.tar")
        saved, read = tarindex.saved_index(shard, digest), tarindex.index_shard(shard)
        assert saved is not None
        assert saved.keys == read.keys and saved.field == read.field
        assert (saved.first == read.first).all() and (saved.offset == read.offset).all()
        assert (saved.size == read.size).all()
    assert not list(shards.glob("*.partial"))


def _samples(folder):
    return sorted((s["__key__"], s["jpg"]) for s in packer.open_dataset(folder, decode="raw"))


def test_an_index_that_is_not_the_shards_is_not_used(shards, tmp_path):
    expected = _samples(shards)
    digest = _digests(shards)[0]
    shard, index = shards / "shard-000000.tar", shards / "shard-000000.idx"
    assert tarindex.saved_index(str(shard), "0" * 64) is None  # another shard's digest
    other = tmp_path / "other"
    shutil.copytree(shards, other)
    (other / "shard-000000.idx").write_bytes((other / "shard-000001.idx").read_bytes())
    assert tarindex.saved_index(str(other / "shard-000000.tar"), digest) is None
    assert _samples(other) == expected
    data = bytearray(index.read_bytes())
    data[len(data) // 2] ^= 0xFF  # a damaged index: unreadable, or not the headers'
    index.write_bytes(bytes(data))
    assert _samples(shards) == expected
    index.write_bytes(b"")
    assert tarindex.saved_index(str(shard), digest) is None and _samples(shards) == expected
    result = run("verify", shards, expect=1)
    assert "shard-000000.idx: not the index of shard-000000.tar" in result.output
    assert "shard-000001" not in result.output


def test_a_resume_leaves_no_index_of_a_shard_it_drops(shards):
    (shards / "shard-000009.idx").write_bytes(b"left by an interrupted run")
    (shards / "shard-000009.idx.partial").write_bytes(b"x")
    writer_folder = shards
    from packer.formats.webdataset import TarWriter

    writer = TarWriter.__new__(TarWriter)
    writer.folder = writer_folder
    writer.parts = json.loads((shards / "manifest.json").read_text())["parts"]
    (shards / "shard-000001.idx").unlink()  # killed before the index was saved
    (shards / "shard-000000.idx.partial").write_bytes(b"x")
    writer.truncate(61)
    assert sorted(p.name for p in shards.glob("*.idx*")) == [
        "shard-000000.idx", "shard-000001.idx", "shard-000002.idx"]
    assert tarindex.saved_index(str(shards / "shard-000001.tar"), _digests(shards)[1])
