"""Object storage under faults: two packs into one URL, a lock left by a killed run,
parts damaged in the cache, parts rewritten or grown in the bucket, a store that never
answers a pack. On a real S3-compatible server (moto's, on 127.0.0.1)."""

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import packer
from conftest import image_bytes, run
from packer.storage import client
from s3_server import cache_peak, point_at


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("s3-faults") / "images"
    for i in range(24):
        folder = root / f"c{i % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{i:03d}.jpg").write_bytes(image_bytes(i, size=(14 + i % 5, 10)))
    return root


def keys(bucket: str, prefix: str = "") -> list[str]:
    listed = client.client().list_objects_v2(Bucket=bucket, Prefix=prefix)
    return [item["Key"] for item in listed.get("Contents", [])]


SLOW_UPLOADS = ("import sys, time, packer.storage.client as c\n"
                "upload = c.upload\n"
                "def slow(*a, **k):\n    time.sleep(0.3)\n    upload(*a, **k)\n"
                "c.upload = slow\n"
                "from packer.cli import cli\ncli(sys.argv[1:], prog_name='packer')\n")


def test_two_packs_into_one_url_never_mix_their_parts(s3, images, tmp_path):
    """The second run (another machine's cache) is refused while the first writes."""
    url = f"s3://{s3}/twice"
    args = ["pack", images, "-o", url, "--max-count", 2, "--overwrite", "-q"]
    first = subprocess.Popen([sys.executable, "-c", SLOW_UPLOADS, *map(str, args)],
                             env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "other")})
    try:
        for _ in range(1200):
            if any(key.endswith(".tar") for key in keys(s3, "twice/")):
                break
            time.sleep(0.05)
        second = run("pack", images, "-o", url, "--max-count", 3, "--overwrite", "-q",
                     expect=2)
    finally:
        assert first.wait(120) == 0
    assert "another `packer pack` is writing this URL now" in second.output
    assert f"{url}.lock" in second.output
    manifest = packer.load_manifest(url)
    assert manifest["options"]["max_count"] == 2 and len(manifest["parts"]) == 12
    assert "OK: 24 samples" in run("verify", url).output
    assert "twice.lock" not in keys(s3)


def test_a_lock_left_by_a_run_killed_here_is_taken_over(s3, images):
    """A lock of a process gone on this machine is taken over; one of another machine
    is left, with the command that removes it."""
    url = f"s3://{s3}/left"
    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()
    for host, pid, refused in (("elsewhere", os.getpid(), True),
                               (socket.gethostname(), dead.pid, False)):
        client.client().put_object(Bucket=s3, Key="left.lock", Body=json.dumps(
            {"host": host, "pid": pid, "since": "2026-01-01T00:00:00+00:00"}).encode())
        result = run("pack", images, "-o", url, "--overwrite", "-q", expect=2 if refused else 0)
        if refused:
            assert f"process {pid} on elsewhere" in result.output
            assert f"aws s3 rm {url}.lock" in result.output
    assert "OK: 24 samples" in run("verify", url).output
    assert "left.lock" not in keys(s3)


def test_a_pack_into_a_whole_bucket_keeps_its_lock_out_of_the_dataset(s3, images):
    url = f"s3://{s3}"
    run("pack", images, "-o", url, "--max-count", 6, "-q")
    run("pack", images, "-o", url, "--max-count", 8, "--overwrite", "-q")
    assert "packer.lock" not in keys(s3)
    assert packer.load_manifest(url)["options"]["max_count"] == 8


DIE_AT_PUBLISH = ("import os, sys, packer.packing.to_s3 as t\n"
                  "t.Uploader.publish = lambda *a: os.kill(os.getpid(), 9)\n"
                  "from packer.cli import cli\ncli(sys.argv[1:], prog_name='packer')\n")


def test_a_resumed_upload_refuses_an_input_changed_since_it_was_packed(s3, images, tmp_path):
    """The pack was complete and its upload cut; the same folder, changed since, is not
    what it holds: a --resume says what changed instead of publishing it."""
    source, url = tmp_path / "images", f"s3://{s3}/changed-input"
    shutil.copytree(images, source)
    args = ["pack", source, "-o", url, "--max-count", 4, "-q"]
    cut = subprocess.run([sys.executable, "-c", DIE_AT_PUBLISH, *map(str, args)])
    assert cut.returncode == -signal.SIGKILL
    edited = source / "c0" / "000.jpg"
    edited.write_bytes(image_bytes(500, size=(14, 10)))
    refused = run(*args, "--resume", expect=2)
    assert f"{edited}: modified since" in refused.output, refused.output
    (source / "c1" / "001.jpg").unlink()
    refused = run(*args, "--resume", expect=2)
    assert "the input changed" in refused.output and "24 samples then, 23 now" in refused.output
    assert "changed-input/manifest.json" not in keys(s3, "changed-input/")
    run(*args, "--overwrite")
    assert "OK: 23 samples" in run("verify", url).output


UPLOADS_AFTER_SWAP = ("import sys, packer.formats.protocol as p, packer.packing.to_s3 as t\n"
                      "held, upload, exchange = [], t.Uploader._upload, p._exchange\n"
                      "t.Uploader._upload = lambda *a: held.append(a)\n"
                      "def late(*a):\n    done = exchange(*a)\n"
                      "    for call in held:\n        upload(*call)\n    return done\n"
                      "p._exchange = late\n"
                      "from packer.cli import cli\ncli(sys.argv[1:], prog_name='packer')\n")


def test_an_upload_that_runs_late_never_sends_an_earlier_runs_staged_pack(s3, images, tmp_path):
    """A run killed at publish leaves its complete pack staged; the next run packs
    other input there: the parts it sends are its own, even when their uploads run
    only once its pack is in place (the earlier one was swapped out beside it)."""
    source, url = tmp_path / "images", f"s3://{s3}/late-uploads"
    shutil.copytree(images, source)
    args = ["pack", source, "-o", url, "--max-count", 4, "-q"]
    cut = subprocess.run([sys.executable, "-c", DIE_AT_PUBLISH, *map(str, args)])
    assert cut.returncode == -signal.SIGKILL
    (source / "c0" / "000.jpg").write_bytes(image_bytes(500, size=(14, 10)))
    done = subprocess.run([sys.executable, "-c", UPLOADS_AFTER_SWAP, *map(str, args),
                           "--overwrite"])
    assert done.returncode == 0
    assert "OK: 24 samples" in run("verify", url).output


def flip_cached(cache: Path, name: str) -> None:
    """One byte of the cached copy of `name` changed: the same size, other bytes."""
    [copy] = cache.rglob(name)
    data = bytearray(copy.read_bytes())
    data[len(data) // 2] ^= 0xFF
    copy.write_bytes(bytes(data))


def test_a_part_damaged_in_the_cache_is_downloaded_again(s3, images, tmp_path):
    """verify and iter_samples check the cached copy again, not blame the dataset."""
    url = f"s3://{s3}/damaged-cache"
    run("pack", images, "-o", url, "--max-count", 6, "-q")
    assert "OK: 24 samples" in run("verify", url).output
    default_cache = tmp_path / "cache-home" / "packer"
    flip_cached(default_cache, "shard-000001.tar")
    assert "OK: 24 samples" in run("verify", url).output
    expected = list(packer.iter_samples(url))
    flip_cached(default_cache, "shard-000002.tar")
    assert list(packer.iter_samples(url)) == expected


def test_a_part_damaged_in_the_cache_is_downloaded_again_by_the_loader(s3, images, tmp_path):
    url = f"s3://{s3}/damaged-loader"
    run("pack", images, "-o", url, "--max-count", 6, "-q")
    cache = tmp_path / "cache"
    expected = {s["__key__"]: s["jpg"] for s in packer.open_dataset(url, decode="raw",
                                                                     cache_dir=cache)}
    [copy] = cache.rglob("shard-000001.tar")
    copy.write_bytes(b"\0" * copy.stat().st_size)
    again = {s["__key__"]: s["jpg"] for s in packer.open_dataset(url, decode="raw",
                                                                  cache_dir=cache)}
    assert again == expected


def test_a_damaged_cached_part_still_wrong_when_downloaded_again_is_reported(
        s3, images, tmp_path, monkeypatch):
    """Downloaded again once (the store serves damaged bytes under the same ETag): the
    check of that download names the object; verify fails, with no traceback."""
    url = f"s3://{s3}/damaged-twice"
    run("pack", images, "-o", url, "--max-count", 6, "-q")
    assert "OK: 24 samples" in run("verify", url).output
    flip_cached(tmp_path / "cache-home" / "packer", "shard-000001.tar")
    downloads = []

    def damaged(url, out, limit=None):
        data = bytearray(client.client().get_object(Bucket=url.bucket, Key=url.key)["Body"]
                         .read())
        data[len(data) // 2] ^= 0xFF
        out.write(data)
        downloads.append(url.name)
        return len(data), hashlib.sha256(data).hexdigest()

    monkeypatch.setattr(client, "download", damaged)
    result = run("verify", url, expect=1)
    assert downloads == ["shard-000001.tar"]
    assert f"{url}/shard-000001.tar: downloaded" in result.output
    assert "sha256" in result.output and "Traceback" not in result.output


def test_a_packed_part_rewritten_in_the_bucket_after_it_was_cached_fails_verify(s3, images):
    """The dataset's identity holds its objects' ETags: verify checks the bucket's
    object, not the older copy in the cache."""
    url = f"s3://{s3}/rewritten"
    run("pack", images, "-o", url, "--max-count", 6, "-q")
    assert "OK: 24 samples" in run("verify", url).output
    key = "rewritten/shard-000001.tar"
    data = bytearray(client.client().get_object(Bucket=s3, Key=key)["Body"].read())
    data[len(data) // 2] ^= 0xFF
    client.client().put_object(Bucket=s3, Key=key, Body=bytes(data))
    result = run("verify", url, expect=1)
    assert f"{url}/shard-000001.tar" in result.output and "sha256" in result.output


def test_a_part_that_grew_in_the_bucket_never_outgrows_the_cache(s3, images, tmp_path):
    url = f"s3://{s3}/grown"
    run("pack", images, "-o", url, "--max-count", 6, "-q")
    key = "grown/shard-000000.tar"
    data = client.client().get_object(Bucket=s3, Key=key)["Body"].read()
    client.client().put_object(Bucket=s3, Key=key, Body=data + b"\0" * (4 << 20))
    cache, limit = tmp_path / "cache", 1 << 20
    with cache_peak(cache, limit) as peak, pytest.raises(packer.errors.DatasetError) as failure:
        list(packer.open_dataset(url, decode="raw", cache_dir=cache, cache_limit=limit))
    assert f"{url}/shard-000000.tar" in str(failure.value)
    assert peak[0] <= limit


@pytest.fixture
def silent_store():
    """An endpoint on 127.0.0.1 that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held, done = [], threading.Event()

    def accept():
        server.settimeout(0.1)
        while not done.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                pass

    thread = threading.Thread(target=accept)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    done.set()
    thread.join()
    for connection in held:
        connection.close()
    server.close()


def test_a_pack_into_a_store_that_never_answers_is_given_up_on_with_a_clear_message(
        silent_store, tmp_path, monkeypatch, images):
    point_at(monkeypatch, silent_store, tmp_path)
    monkeypatch.setattr(client, "READ_TIMEOUT", 1)
    monkeypatch.setattr(client, "ATTEMPTS", 2)
    result = run("pack", images, "-o", "s3://bucket/x", "-q", expect=1)
    assert "s3://bucket/x" in result.output and "did not answer" in result.output
    assert "Traceback" not in result.output
