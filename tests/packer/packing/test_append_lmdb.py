"""An LMDB append writes a file of its own (gen-000001.mdb, ...): data.mdb is linked,
never written; every reader sees the whole dataset, plain `lmdb` too; a damaged
generation file is named; a killed append resumes; a dataset of layout 2 takes one."""

import json
import os
import signal
import subprocess
import sys

import lmdb
import msgpack
import pytest

import packer
from conftest import KILL_AFTER_TWO_PARTS, run, source_files
from packer.errors import DatasetError
from packer.formats.manifests import local_manifest
from packer.manifest import MANIFEST_NAME, seal, write_json_atomic
from packer.sample import KEY


def _packed(tmp_path, old, *more):
    out = tmp_path / "out"
    run("pack", old, "--to", "lmdb", "-o", out, "-q")
    for source in more:
        run("pack", source, "--append", out, "-q")
    return out


def _expected(*roots) -> dict[str, bytes]:
    return {rel.removesuffix(".jpg"): data for root in roots
            for rel, data in source_files(root).items()}


def _plain_lmdb(out) -> dict[str, bytes]:
    """The samples as docs/formats.md says a plain `lmdb` user reads them: the folder's
    environment, then each gen file with subdir=False; every key but __meta__ a sample."""
    samples = {}
    paths = [(str(out), True)] + [(str(p), False) for p in sorted(out.glob("gen-*.mdb"))]
    for path, subdir in paths:
        env = lmdb.open(path, subdir=subdir, readonly=True, lock=False)
        with env.begin() as txn:
            for key, value in txn.cursor():
                if key != b"__meta__":
                    sample = msgpack.unpackb(value, raw=False)
                    samples[sample[KEY]] = (int(key), sample["jpg"])
        env.close()
    return samples


def test_an_lmdb_append_links_data_mdb_and_writes_a_file_of_its_own(three_sources, tmp_path):
    old, new, third = three_sources
    out = _packed(tmp_path, old)
    data = out / "data.mdb"
    before, inode = data.read_bytes(), data.stat().st_ino
    run("pack", new, "--append", out, "-q")
    assert data.read_bytes() == before and data.stat().st_ino == inode
    manifest = local_manifest(out)
    assert manifest["layout_version"] == 3
    assert [p.get("file") for p in manifest["parts"]] == [None, "gen-000001.mdb"]
    assert not list(out.glob("*-lock"))
    gen1 = (out / "gen-000001.mdb").read_bytes()
    run("pack", third, "--append", out, "-q")  # a second generation: a second file
    assert data.read_bytes() == before and data.stat().st_ino == inode
    assert (out / "gen-000001.mdb").read_bytes() == gen1
    manifest = local_manifest(out)
    assert manifest["count"] == 18 and manifest["parts"][-1]["file"] == "gen-000002.mdb"
    env = lmdb.open(str(out / "gen-000002.mdb"), subdir=False, readonly=True, lock=False)
    with env.begin() as txn:  # each file's meta record: its own samples
        meta = json.loads(txn.get(b"__meta__"))
        assert (meta["count"], meta["first"], meta["generation"]) == (2, 16, 2)
    env.close()

    expected = _expected(old, new, third)
    read = {s[KEY]: s["jpg"] for s in packer.open_dataset(out, decode="raw")}
    assert read == expected
    assert [k for k, _ in sorted(_plain_lmdb(out).items(), key=lambda kv: kv[1][0])] == [
        s[KEY] for s in packer.open_dataset(out, decode="raw")]  # keys: the global index
    assert {k: v for k, (_, v) in _plain_lmdb(out).items()} == expected
    loaded = [k for batch in packer.DataLoader(packer.open_dataset(out, decode="raw",
                                                                   shuffle=True),
                                               batch_size=4) for k in batch[KEY]]
    assert sorted(loaded) == sorted(expected)
    assert json.loads(run("verify", out, "-q", "--json", "--against", old, "--against", new,
                          "--against", third).output)["ok"]
    run("unpack", out, "-o", tmp_path / "back", "-q")
    assert _expected(tmp_path / "back") == expected
    shown = run("inspect", out).output
    assert "stored in 3 files: data.mdb (samples 0 .. 5), gen-000001.mdb (samples 6 .. 15)" \
        in shown and "gen-000002.mdb (samples 16 .. 17)" in shown


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "packer", *map(str, args)],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("damage", ["truncated", "page"])
def test_a_damaged_generation_file_is_named(three_sources, damage, tmp_path):
    old, new, _ = three_sources
    out = _packed(tmp_path, old, new)
    gen = out / "gen-000001.mdb"
    if damage == "truncated":
        os.truncate(gen, gen.stat().st_size - 4096)
        expected = "truncated"
    else:  # the first page after the two meta pages
        data = bytearray(gen.read_bytes())
        data[2 * 4096:3 * 4096] = bytes(4096)
        gen.write_bytes(bytes(data))
        expected = "damaged"
    for command in (["verify", out], ["unpack", out, "-o", tmp_path / "back"]):
        result = _cli(*command, "-q")
        said = result.stdout + result.stderr
        assert result.returncode == 1 and "Traceback" not in said
        assert f"{gen}: " in said and expected in said, said
    with pytest.raises(DatasetError, match=f"{gen}: .*{expected}"):
        list(packer.open_dataset(out, decode="raw"))


def test_a_missing_generation_file_is_named(three_sources, tmp_path):
    old, new, _ = three_sources
    out = _packed(tmp_path, old, new)
    (out / "gen-000001.mdb").unlink()
    result = _cli("verify", out, "-q")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"{out / 'gen-000001.mdb'}: missing" in result.stderr


def test_a_killed_lmdb_append_leaves_data_mdb_and_resumes(three_sources, tmp_path):
    old, new, _ = three_sources
    out = _packed(tmp_path, old)
    data, before = out / "data.mdb", local_manifest(out)
    inode, contents = data.stat().st_ino, data.read_bytes()
    args = ["pack", str(new), "--append", str(out), "-q"]
    killed = subprocess.run([sys.executable, "-c", KILL_AFTER_TWO_PARTS, *args])
    assert killed.returncode == -signal.SIGKILL
    assert local_manifest(out) == before and not (out / "gen-000001.mdb").exists()
    assert (out.with_name("out.partial") / "gen-000001.mdb").exists()
    run(*args, "--resume")
    assert data.stat().st_ino == inode and data.read_bytes() == contents
    assert {s[KEY]: s["jpg"] for s in packer.open_dataset(out, decode="raw")} == _expected(
        old, new)
    assert json.loads(run("verify", out, "-q", "--json").output)["ok"]


def test_a_layout_2_dataset_takes_an_append_that_an_older_packer_refuses(three_sources, tmp_path,
                                                                         monkeypatch):
    """A dataset packed before generation files (layout 2) reads and takes an append; the
    appended manifest says layout 3, which a packer of layout 2 refuses (it would count
    data.mdb's entries against every part and call the data damaged)."""
    old, new, _ = three_sources
    out = _packed(tmp_path, old)
    manifest = local_manifest(out)
    manifest["layout_version"] = 2
    seal(manifest)
    write_json_atomic(out / MANIFEST_NAME, manifest)
    assert len(packer.open_dataset(out)) == 6
    run("pack", new, "--append", out, "-q")
    assert local_manifest(out)["layout_version"] == 3
    assert len(list(packer.open_dataset(out, decode="raw"))) == 16
    monkeypatch.setattr("packer.formats.manifests.LAYOUT_VERSION", 2)
    with pytest.raises(DatasetError, match="upgrade packer"):
        local_manifest(out)


def test_an_append_whose_samples_are_all_skipped_leaves_no_file(three_sources, tmp_path):
    old, _, _ = three_sources
    out = _packed(tmp_path, old)
    run("pack", old, "--append", out, "-q", "--on-duplicate", "skip")
    manifest = local_manifest(out)
    assert manifest["count"] == 6 and manifest["appends"][0]["count"] == 0
    assert sorted(p.name for p in out.iterdir()) == ["data.mdb", MANIFEST_NAME]
    assert json.loads(run("verify", out, "-q", "--json").output)["ok"]
