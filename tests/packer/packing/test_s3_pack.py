"""Packing into object storage, every format round trip through a bucket, and the
errors of object storage, on a real S3-compatible server (moto's, on 127.0.0.1)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import packer
from conftest import image_bytes, run, tmpfs
from packer.formats import FORMAT_NAMES
from packer.storage.client import client
from s3_server import free_port, point_at, start_server, stop_server

MAX_COUNT = 6


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("s3-pack") / "images"
    for i in range(40):
        folder = root / f"c{i % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{i:03d}.jpg").write_bytes(image_bytes(i, size=(14 + i % 5, 10)))
    return root


def objects(bucket: str, prefix: str) -> dict[str, bytes]:
    listed = client().list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    return {o["Key"][len(prefix):].lstrip("/"): client().get_object(
        Bucket=bucket, Key=o["Key"])["Body"].read() for o in listed}


def local_files(out: Path) -> dict[str, bytes]:
    if out.is_file():
        return {"": out.read_bytes()}
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}


def same_pack(stored: dict[str, bytes], local: dict[str, bytes], exact: bool = True) -> None:
    """The same files, byte for byte, but for the manifest's time of packing (LMDB and
    HDF5 files differ between any two packs: LMDB's free pages, HDF5's copy of the
    manifest; their samples are compared instead)."""
    assert sorted(stored) == sorted(local)
    for name in local:
        if name == "manifest.json":
            ours, theirs = json.loads(stored[name]), json.loads(local[name])
            for manifest in (ours, theirs):
                manifest.pop("created"), manifest.pop("manifest_sha256")
            assert ours == theirs
        elif exact:
            assert stored[name] == local[name], name


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_every_format_round_trips_through_a_bucket(s3, images, tmp_path, fmt):
    local = tmp_path / "local"
    run("pack", images, "--to", fmt, "-o", local, "--max-count", MAX_COUNT, "-q")
    url = f"s3://{s3}/{fmt}"
    result = run("pack", images, "--to", fmt, "-o", url, "--max-count", MAX_COUNT, "-q")
    assert url in result.output
    same_pack(objects(s3, fmt), local_files(local), exact=fmt in ("webdataset", "tfrecord"))
    expected = {s["__key__"]: s for s in packer.iter_samples(local)}
    assert {s["__key__"]: s for s in packer.iter_samples(url)} == expected
    ds = packer.open_dataset(url, decode="raw", cache_dir=tmp_path / "cache")
    assert sorted(s["__key__"] for s in ds) == sorted(expected)
    assert json.loads(run("inspect", url, "--json").output)["count"] == len(expected)
    assert "OK: 40 samples" in run("verify", url).output


def test_an_existing_dataset_is_replaced_only_with_overwrite(s3, images, tmp_path):
    url = f"s3://{s3}/twice"
    run("pack", images, "-o", url, "--max-count", 30, "-q")
    again = run("pack", images, "-o", url, "-q", expect=2)
    assert "already exists" in again.output and url in again.output
    run("pack", images, "-o", url, "--max-count", 15, "--overwrite", "-q")
    assert sorted(objects(s3, "twice")) == ["manifest.json", *(f"shard-{i:06d}.{kind}"
                                                               for i in range(3)
                                                               for kind in ("idx", "tar"))]


def test_no_local_folder_is_made_for_an_s3_output(s3, images, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run("pack", images, "-o", f"s3://{s3}/x", "-q")
    assert not (tmp_path / "s3:").exists()


def test_a_killed_upload_never_looks_complete_and_resumes(s3, images, tmp_path):
    url = f"s3://{s3}/killed"
    local = tmp_path / "local"
    run("pack", images, "-o", local, "--max-count", 2, "-q")
    slow = ("import sys, time, packer.storage.client as c\n"
            "upload = c.upload\n"
            "def slow(*a, **k):\n    time.sleep(0.3)\n    upload(*a, **k)\n"
            "c.upload = slow\n"
            "from packer.cli import main\nsys.argv = ['packer', *sys.argv[1:]]\nmain()\n")
    process = subprocess.Popen([sys.executable, "-c", slow, "pack", str(images), "-o", url,
                                "--max-count", "2", "-q"], env=os.environ.copy())
    try:
        for _ in range(600):
            if sum(name.endswith(".tar") for name in objects(s3, "killed")) >= 2:
                break
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    stored = objects(s3, "killed")
    assert "manifest.json" not in stored and any(name.endswith(".tar") for name in stored)
    with pytest.raises(packer.errors.DatasetError, match="unfinished pack"):
        packer.open_dataset(url, cache_dir=tmp_path / "cache")
    refused = run("pack", images, "-o", url, "--max-count", 2, "-q", expect=2)
    assert "--resume" in refused.output
    run("pack", images, "-o", url, "--max-count", 2, "--resume", "-q")
    same_pack(objects(s3, "killed"), local_files(local))


def test_a_missing_bucket_is_one_clear_error(s3, images, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for args in (["inspect", "s3://no-such-bucket/x"], ["verify", "s3://no-such-bucket/x"],
                 ["pack", images, "-o", "s3://no-such-bucket/x", "-q"]):
        result = run(*args, expect=1)
        assert "s3://no-such-bucket/x" in result.output and "no such bucket" in result.output
        assert "Traceback" not in result.output
    assert not (tmp_path / "s3:").exists()


def test_a_missing_dataset_names_its_url(s3):
    result = run("inspect", f"s3://{s3}/nothing-here", expect=2)
    assert f"s3://{s3}/nothing-here: no such dataset" in result.output


def test_wrong_credentials_are_one_clear_error(tmp_path, monkeypatch, images):
    server, endpoint = start_server(INITIAL_NO_AUTH_ACTION_COUNT="0")  # checks every key
    try:
        point_at(monkeypatch, endpoint, tmp_path)
        for args in (["inspect", "s3://bucket/x"], ["pack", images, "-o", "s3://bucket/x"]):
            result = run(*args, expect=1)
            assert "s3://bucket/x" in result.output and "refused the credentials" in \
                result.output
    finally:
        stop_server(server)


def test_an_unreachable_endpoint_is_one_clear_error(tmp_path, monkeypatch):
    point_at(monkeypatch, f"http://127.0.0.1:{free_port()}", tmp_path)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    result = run("inspect", "s3://bucket/x", expect=1)
    assert "s3://bucket/x" in result.output and "cannot reach the object store" in result.output


@pytest.fixture
def full_disk(tmp_path):
    """A 1 MiB tmpfs (where this system lets the tests mount one)."""
    with tmpfs(tmp_path / "small", "size=1m") as mount:
        (mount / "filler").write_bytes(b"\0" * (1000 << 10))  # 24 KiB left
        yield mount


def test_a_cache_on_a_full_disk_is_one_clear_error(s3, images, tmp_path, full_disk):
    url = f"s3://{s3}/big"
    run("pack", images, "-o", url, "-q")
    with pytest.raises(packer.errors.PackerError, match="its disk is full") as failure:
        ds = packer.open_dataset(url, decode="raw", cache_dir=full_disk / "cache",
                                 cache_limit="10MB")
        list(ds)
    assert str(full_disk / "cache") in str(failure.value)
    assert not [p for p in (full_disk / "cache").rglob("*") if p.is_file() and p.name != "lock"]


def test_a_damaged_part_in_the_bucket_is_never_cached(s3, images, tmp_path):
    url = f"s3://{s3}/damaged"
    run("pack", images, "-o", url, "--max-count", MAX_COUNT, "-q")
    key = "damaged/shard-000001.tar"
    data = bytearray(client().get_object(Bucket=s3, Key=key)["Body"].read())
    data[600] ^= 1
    client().put_object(Bucket=s3, Key=key, Body=bytes(data))
    result = run("verify", url, expect=1)
    assert f"{url}/shard-000001.tar" in result.output and "sha256" in result.output
    with pytest.raises(packer.errors.DatasetError, match="shard-000001.tar"):
        list(packer.open_dataset(url, decode="raw", cache_dir=tmp_path / "cache"))
    assert not list((tmp_path / "cache").rglob("shard-000001.tar*"))


def test_a_part_whose_second_file_fills_the_disk_leaves_nothing_reserved(full_disk):
    """Room is reserved for a part's files together: when the disk cannot hold the
    second, the first one's room is given back too."""
    from packer.storage.cache import PartCache

    cache = PartCache(full_disk / "cache", "10MB")
    never = lambda file: pytest.fail("nothing is downloaded")  # noqa: E731
    with pytest.raises(packer.errors.PackerError, match="its disk is full"):
        cache.acquire_all("d", [("shard.tar", 8 << 10, None, never, "s3://b/shard.tar"),
                                ("shard.idx", 200 << 10, None, never, "s3://b/shard.idx")])
    assert not [p for p in (full_disk / "cache").rglob("*") if p.is_file() and p.name != "lock"]


def test_a_resume_after_a_cut_upload_publishes_only_the_pack_it_continues(s3, images, tmp_path):
    """The local pack was complete, its upload was cut: a --resume with another source or
    other options is refused with the difference; the same request publishes it."""
    url = f"s3://{s3}/cut-upload"
    die_at_publish = ("import os, sys, packer.packing.to_s3 as t\n"
                      "t.Uploader.publish = lambda *a: os.kill(os.getpid(), 9)\n"
                      "from packer.cli import main\nsys.argv = ['packer', *sys.argv[1:]]\n"
                      "main()\n")
    cut = subprocess.run([sys.executable, "-c", die_at_publish, "pack", str(images), "-o", url,
                          "--max-count", "2", "-q"], env=os.environ.copy())
    assert cut.returncode == -signal.SIGKILL
    other = tmp_path / "other"
    (other / "c0").mkdir(parents=True)
    (other / "c0" / "x.jpg").write_bytes(image_bytes(99))
    for args, said in (([other, "--max-count", 2], "the source was"),
                       ([images, "--max-count", 3], "--max-count was 2, now 3"),
                       ([images, "--max-count", 2, "--to", "lmdb"], "--to was 'webdataset'"),
                       ([images, "--max-count", 2, "--check", "decode"], "--check was")):
        refused = run("pack", args[0], "-o", url, *args[1:], "--resume", "-q", expect=2)
        assert "another pack" in refused.output and said in refused.output, refused.output
        assert "manifest.json" not in objects(s3, "cut-upload")
    run("pack", images, "-o", url, "--max-count", 2, "--resume", "-q")
    local = tmp_path / "local"
    run("pack", images, "-o", local, "--max-count", 2, "-q")
    same_pack(objects(s3, "cut-upload"), local_files(local))


@pytest.mark.parametrize("fmt", ["webdataset", "tfrecord"])
def test_the_files_beside_each_part_go_up_with_it(s3, images, tmp_path, monkeypatch, fmt):
    """A shard's saved index and a TFRecord part's .tfkeys are uploaded as their part
    closes (or with the next part, while a thread still saves it), not left for the
    end: in the store before the last part is published, for every part before the last
    two (a loaded machine saved shard 5's index only after shard 6 closed)."""
    from packer.packing import to_s3

    in_store_before_publish = {}
    publish = to_s3.Uploader.publish

    def publish_after_looking(uploader, staged, old):
        uploader._collect(0)
        in_store_before_publish.update(objects(s3, fmt))
        return publish(uploader, staged, old)

    monkeypatch.setattr(to_s3.Uploader, "publish", publish_after_looking)
    run("pack", images, "--to", fmt, "-o", f"s3://{s3}/{fmt}", "--max-count", MAX_COUNT, "-q")
    local = tmp_path / "local"
    run("pack", images, "--to", fmt, "-o", local, "--max-count", MAX_COUNT, "-q")
    parts = packer.load_manifest(local)["parts"]
    assert len(parts) == 7
    suffixes = (".tar", ".idx") if fmt == "webdataset" else (".tfrecord", ".tfindex", ".tfkeys")
    for part in parts[:-2]:
        stem = part["name"].rpartition(".")[0]
        for suffix in suffixes:
            assert in_store_before_publish[stem + suffix] == (local / (stem + suffix)).read_bytes()
    assert sorted(objects(s3, fmt)) == sorted(local_files(local))


def test_a_remote_tfrecord_datasets_keys_are_read_from_its_tfkeys(s3, images, tmp_path,
                                                                  monkeypatch):
    """Verify fetches each part's .tfkeys with it and checks it against the manifest; a
    local copy of the objects appends with the keys read from them, no record read."""
    from packer.formats import tfrecord

    url = f"s3://{s3}/tfr"
    run("pack", images, "--to", "tfrecord", "-o", url, "--max-count", MAX_COUNT, "-q")
    copy = tmp_path / "copy"
    copy.mkdir()
    for name, data in objects(s3, "tfr").items():
        (copy / name).write_bytes(data)
    more = tmp_path / "more"
    (more / "c0").mkdir(parents=True)
    (more / "c0" / "new.jpg").write_bytes(image_bytes(500))
    with monkeypatch.context() as patched:
        patched.setattr(tfrecord, "read_part", lambda *a, **k: pytest.fail("records read"))
        run("pack", more, "--append", copy, "-q")
    assert packer.load_manifest(copy)["count"] == 41
    keys = json.loads(objects(s3, "tfr")["part-000001.tfkeys"])
    client().put_object(Bucket=s3, Key="tfr/part-000001.tfkeys",
                        Body=json.dumps(keys[::-1]).encode())
    result = run("verify", url, "--cache-dir", tmp_path / "cache", expect=1)
    assert "part-000001.tfkeys: its sha256 is not the manifest's keys_sha256" in result.output
