"""Datasets in object storage read through the bounded local cache, on a real
S3-compatible server (moto's, on 127.0.0.1)."""

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

import packer
from conftest import image_bytes, run
from packer.storage.cache import TEMP_MARK, PartCache
from s3_server import cache_peak, point_at, start_server, stop_server, upload_folder

SHARDS = 8


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("s3-images") / "images"
    for i in range(SHARDS * 10):
        folder = root / f"c{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{i:03d}.jpg").write_bytes(image_bytes(i, size=(16 + i % 7, 12)))
    return root


@pytest.fixture(scope="module")
def local_wds(images) -> Path:
    out = images.parent / "wds"
    run("pack", images, "-o", out, "--max-count", "10", "-q")
    return out


@pytest.fixture
def remote_wds(s3, local_wds) -> str:
    upload_folder(local_wds, s3, "wds")
    return f"s3://{s3}/wds"


def samples_of(dataset) -> dict[str, bytes]:
    return {s["__key__"]: s["jpg"] for s in dataset}


def test_open_dataset_from_s3_reads_what_was_packed(remote_wds, local_wds, tmp_path):
    ds = packer.open_dataset(remote_wds, decode="raw", cache_dir=tmp_path / "cache")
    local = packer.open_dataset(local_wds, decode="raw")
    assert len(ds) == len(local) == SHARDS * 10
    assert ds.classes == local.classes
    assert samples_of(ds) == samples_of(local)
    # the cache holds every part once, whole
    cached = sorted(p.name for p in (tmp_path / "cache").rglob("*.tar"))
    assert cached == sorted(p.name for p in local_wds.glob("*.tar"))


def test_cache_stays_under_its_limit_with_every_sample_once(remote_wds, local_wds, tmp_path):
    shard_bytes = [p.stat().st_size for p in sorted(local_wds.glob("*.tar"))]
    limit = sum(shard_bytes) // 4 + max(shard_bytes)  # about a quarter of the dataset
    cache = tmp_path / "cache"
    ds = packer.open_dataset(remote_wds, decode="raw", shuffle=True, cache_dir=cache,
                             cache_limit=limit)
    assert not ds.source.seekable  # parts read whole, in shuffled order: one download each
    with cache_peak(cache, limit) as peak:
        for epoch in range(2):
            ds.set_epoch(epoch)
            keys = [k for batch in packer.DataLoader(ds, batch_size=7, num_workers=2)
                    for k in batch["__key__"]]
            assert sorted(keys) == sorted(samples_of(packer.open_dataset(local_wds,
                                                                         decode="raw")))
    assert 0 < peak[0] <= limit
    assert PartCache(cache, limit).usage() <= limit
    assert not list(cache.rglob(f"*{TEMP_MARK}*"))


def test_second_epoch_reads_from_the_cache_without_the_network(local_wds, tmp_path,
                                                                 monkeypatch):
    server, endpoint = start_server()
    try:
        point_at(monkeypatch, endpoint, tmp_path)
        from packer.storage.client import client

        client().create_bucket(Bucket="private")
        upload_folder(local_wds, "private", "wds")
        ds = packer.open_dataset("s3://private/wds", decode="raw", shuffle=True,
                                 cache_dir=tmp_path / "cache")
        first = [k for b in packer.DataLoader(ds, batch_size=5, num_workers=2)
                 for k in b["__key__"]]
    finally:
        stop_server(server)
    ds.set_epoch(1)
    second = [k for b in packer.DataLoader(ds, batch_size=5, num_workers=2)
              for k in b["__key__"]]
    assert sorted(first) == sorted(second) and len(second) == SHARDS * 10
    assert first != second  # another epoch, another order


def test_a_killed_download_is_never_used(remote_wds, local_wds, tmp_path):
    """A process killed (SIGKILL) halfway through downloading a part leaves its
    temporary file; readers never take it, and the next one that makes room removes it."""
    cache = tmp_path / "cache"
    ds = packer.open_dataset(remote_wds, decode="raw", cache_dir=cache)
    remote = ds.source
    first = remote.part_files[0][0]
    script = f"""
import os, signal
from packer.storage.cache import PartCache
def half(file):
    file.write(b"x" * ({first.size} // 2)); file.flush()
    os.kill(os.getpid(), signal.SIGKILL)
PartCache({str(cache)!r}).acquire({remote.dataset!r}, {first.name!r}, {first.size},
                                  None, half, "test")
"""
    killed = subprocess.run([sys.executable, "-c", script])
    assert killed.returncode == -signal.SIGKILL
    folder = remote.cache.folder(remote.dataset)
    assert [p.name for p in folder.iterdir()] and not (folder / first.name).exists()
    assert samples_of(ds) == samples_of(packer.open_dataset(local_wds, decode="raw"))
    assert not list(cache.rglob(f"*{TEMP_MARK}*"))
    assert (folder / first.name).read_bytes() == (local_wds / first.name).read_bytes()


TIGHT_SCRIPT = """
import sys, packer
url, cache, limit = sys.argv[1:]
ds = packer.open_dataset(url, decode="raw", shuffle=True, cache_dir=cache, cache_limit=int(limit))
loader = packer.DataLoader(ds, batch_size=3, num_workers=2, multiprocessing_context="spawn")
print(sorted(k for b in loader for k in b["__key__"]))
"""


def test_a_cache_of_one_part_and_a_half_serves_two_spawned_workers(remote_wds, local_wds,
                                                                    tmp_path):
    """Each worker waits its turn in the DataLoader's round-robin holding no part, so a
    cache too small for both workers' parts at once still gives every sample."""
    limit = max(p.stat().st_size for p in local_wds.glob("*.tar")) * 3 // 2
    done = subprocess.run([sys.executable, "-c", TIGHT_SCRIPT, remote_wds,
                           str(tmp_path / "cache"), str(limit)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(sorted(samples_of(packer.open_dataset(local_wds,
                                                                            decode="raw"))))
    assert PartCache(tmp_path / "cache", limit).usage() <= limit


RANK_SCRIPT = """
import json, sys, packer
url, cache, limit, rank, out = sys.argv[1:]
ds = packer.open_dataset(url, decode="raw", shuffle=True, seed=5, rank=int(rank),
                         world_size=2, cache_dir=cache, cache_limit=int(limit))
keys = [k for b in packer.DataLoader(ds, batch_size=4, num_workers=2) for k in b["__key__"]]
open(out, "w").write(json.dumps(keys))
"""


def test_two_ranks_share_one_cache_and_read_every_sample_once(remote_wds, local_wds,
                                                               tmp_path):
    cache = tmp_path / "cache"
    limit = sum(p.stat().st_size for p in local_wds.glob("*.tar")) // 2
    ranks = [subprocess.Popen([sys.executable, "-c", RANK_SCRIPT, remote_wds, str(cache),
                               str(limit), str(rank), str(tmp_path / f"rank{rank}.json")],
                              env=os.environ.copy()) for rank in range(2)]
    assert [rank.wait(120) for rank in ranks] == [0, 0]
    keys = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert len(keys[0]) == len(keys[1]) == SHARDS * 10 // 2
    assert sorted(keys[0] + keys[1]) == sorted(samples_of(packer.open_dataset(local_wds,
                                                                              decode="raw")))
    assert PartCache(cache, limit).usage() <= limit
    assert not list(cache.rglob(f"*{TEMP_MARK}*"))


def test_plain_webdataset_shards_in_a_bucket(s3, local_wds, tmp_path):
    for shard in sorted(local_wds.glob("*.tar")):
        upload_folder_file = f"plain/{shard.name}"
        from packer.storage.client import client

        client().upload_file(str(shard), s3, upload_folder_file)
    ds = packer.open_dataset(f"s3://{s3}/plain", decode="raw", cache_dir=tmp_path / "c")
    assert ds.classes is None
    assert samples_of(ds) == samples_of(packer.open_dataset(local_wds, decode="raw"))
    one = packer.open_dataset(f"s3://{s3}/plain/shard-{{000000..000001}}.tar", decode="raw",
                              cache_dir=tmp_path / "c")
    assert len(one) == 20


def test_a_part_in_use_is_never_evicted(tmp_path):
    """The least recently used part that no one holds goes first; a held one stays."""
    cache = PartCache(tmp_path / "cache", 300)

    def fetch(byte, size):
        def write(file):
            file.write(byte * size)
            import hashlib

            return size, hashlib.sha256(byte * size).hexdigest()
        return write

    a = cache.acquire("d", "a", 100, None, fetch(b"a", 100), "a")
    b = cache.acquire("d", "b", 100, None, fetch(b"b", 100), "b")
    a.release()
    c = cache.acquire("d", "c", 150, None, fetch(b"c", 150), "c")
    names = sorted(p.name for p in cache.folder("d").iterdir())
    assert names == ["b", "c"] and cache.usage() <= 300
    b.release()
    c.release()
    with pytest.raises(packer.errors.DatasetError, match="sha256"):
        cache.acquire("d", "e", 10, "0" * 64, fetch(b"e", 10), "s3://x/e")
    assert not (cache.folder("d") / "e").exists()


def test_bench_and_train_take_an_s3_url(s3, tmp_path):
    from conftest import colour_images
    from train.cli import cli as train_cli

    colour_images(tmp_path / "colours", [(220, 40, 40), (40, 40, 220)], per_class=24,
                  spread=30)
    url = f"s3://{s3}/colours"
    run("pack", tmp_path / "colours", "-o", url, "--max-count", "16", "-q")
    bench = run("bench", url, "--workers", "0", "--repeat", "1", "--no-decode",
                "--json", tmp_path / "bench.json")
    assert url in bench.output
    assert json.loads((tmp_path / "bench.json").read_text())["results"][0]["samples"] == 48
    from click.testing import CliRunner

    fitted = CliRunner().invoke(train_cli, ["fit", url, "--out", str(tmp_path / "run"),
                                            "--epochs", "2", "--image-size", "16",
                                            "--batch-size", "8", "--workers", "0",
                                            "--lr", "3e-3"], catch_exceptions=False)
    assert fitted.exit_code == 0, fitted.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["best"]["val"]["accuracy"] is not None


def test_two_readers_gathering_parts_of_two_files_never_wait_for_each_other(
        s3, images, tmp_path, monkeypatch):
    """A TFRecord part is its records and its index. Two readers that each got their
    part's records used to wait for ever for room for the index, each holding what the
    other needed; now one gathers its part whole while the other waits holding nothing."""
    import threading

    from packer.read import remote
    from packer.storage import client

    local = tmp_path / "tfr"
    run("pack", images, "--to", "tfrecord", "-o", local, "--max-count", "10", "-q")
    upload_folder(local, s3, "tfr")
    parts = remote.RemoteParts(f"s3://{s3}/tfr", tmp_path / "cache", 1)
    sizes = [[file.size for file in files] for files in parts.part_files[:2]]
    # room for two parts' records and less than one index more
    limit = sizes[0][0] + sizes[1][0] + min(sizes[0][1], sizes[1][1]) - 1
    parts = remote.RemoteParts(f"s3://{s3}/tfr", tmp_path / "cache", limit)
    both_have_records = threading.Barrier(2, timeout=3)
    download = client.download

    def download_in_step(url, out, limit=None):
        done = download(url, out, limit)
        if str(url).endswith(".tfrecord"):
            try:  # both readers hold their records before either asks for its index
                both_have_records.wait()
            except threading.BrokenBarrierError:
                pass
        return done
    monkeypatch.setattr(client, "download", download_in_step)
    gathered = []

    def gather(part: int) -> None:
        held = parts.hold(parts.part_files[part])
        gathered.append(sorted(file.path.name for file in held))
        for file in held:
            file.release()
    readers = [threading.Thread(target=gather, args=(part,), daemon=True) for part in (0, 1)]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join(60)
    assert not any(reader.is_alive() for reader in readers), "the readers wait for each other"
    assert sorted(gathered) == sorted(sorted(f.name for f in files)
                                      for files in parts.part_files[:2])
    assert PartCache(tmp_path / "cache", limit).usage() <= limit


def test_a_part_whose_files_outgrow_the_cache_is_refused_at_once(tmp_path):
    cache = PartCache(tmp_path / "cache", 150)
    never = lambda file: pytest.fail("nothing is downloaded")  # noqa: E731
    with pytest.raises(packer.errors.PackerError, match="other files of its part: 160 bytes"):
        cache.acquire_all("d", [("a", 100, None, never, "s3://x/a"),
                                ("a.idx", 60, None, never, "s3://x/a.idx")])


def test_shards_in_a_bucket_are_read_through_their_saved_indexes(remote_wds, local_wds,
                                                                  tmp_path, monkeypatch):
    """Each shard's saved index comes down with it: no worker reads the headers."""
    from packer.formats.webdataset import tarindex

    def no_header_scan(path):
        raise AssertionError(f"{path}: indexed from its headers")
    monkeypatch.setattr(tarindex, "index_shard", no_header_scan)
    ds = packer.open_dataset(remote_wds, decode="raw", cache_dir=tmp_path / "cache")
    assert samples_of(ds) == samples_of(packer.open_dataset(local_wds, decode="raw"))
    cached = sorted(p.name for p in (tmp_path / "cache").rglob("*.idx"))
    assert cached == sorted(p.name for p in local_wds.glob("*.idx")) and len(cached) == SHARDS


def test_shards_without_saved_indexes_in_a_bucket_still_read(s3, local_wds, tmp_path):
    """A dataset packed before shards had saved indexes: read from the headers."""
    import shutil

    old = tmp_path / "old"
    shutil.copytree(local_wds, old)
    for index in old.glob("*.idx"):
        index.unlink()
    upload_folder(old, s3, "old")
    ds = packer.open_dataset(f"s3://{s3}/old", decode="raw", cache_dir=tmp_path / "cache")
    assert samples_of(ds) == samples_of(packer.open_dataset(local_wds, decode="raw"))


def test_a_shard_rewritten_in_place_at_the_same_size_is_read_anew(s3, tmp_path):

    from packer.storage.client import client

    def shard(letter: bytes) -> bytes:
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for i in range(20):
                info = tarfile.TarInfo(f"{i:04d}.txt")
                info.size, info.mtime = 8, 0
                tar.addfile(info, io.BytesIO(letter * 8))
        return out.getvalue()

    old, new = shard(b"a"), shard(b"b")
    assert len(old) == len(new)
    url = f"s3://{s3}/rewritten"
    for data in (old, new):
        client().put_object(Bucket=s3, Key="rewritten/shard-000000.tar", Body=data)
        ds = packer.open_dataset(url, decode="raw", cache_dir=tmp_path / "cache")
        assert {s["txt"] for s in ds} == {data[512:520].decode()}


def test_a_store_that_never_answers_is_given_up_on_in_seconds(tmp_path, monkeypatch):
    """A server on 127.0.0.1 that takes connections and says nothing: one message that
    says how long each try waited, instead of minutes of silence."""
    import socket
    import threading

    from packer.storage import client

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held = []
    threading.Thread(target=lambda: [held.append(listener.accept()) for _ in range(8)],
                     daemon=True).start()
    point_at(monkeypatch, f"http://127.0.0.1:{listener.getsockname()[1]}", tmp_path)
    monkeypatch.setattr(client, "READ_TIMEOUT", 1)
    monkeypatch.setattr(client, "ATTEMPTS", 2)
    began = time.monotonic()
    result = run("inspect", "s3://quiet-bucket/data", expect=1)
    assert "did not answer" in result.output and "waited 5 s to connect and 1 s" in result.output
    assert time.monotonic() - began < 30
    listener.close()


def test_a_part_that_grew_in_the_bucket_is_not_downloaded_whole(s3, remote_wds, local_wds,
                                                               tmp_path):
    """Its download stops one byte past the size the manifest gives: the cache never
    holds more than it made room for."""
    from packer.storage.client import client

    first = sorted(local_wds.glob("*.tar"))[0]
    ds = packer.open_dataset(remote_wds, decode="raw", cache_dir=tmp_path / "cache")
    client().put_object(Bucket=s3, Key=f"wds/{first.name}", Body=first.read_bytes() * 40)
    with pytest.raises(packer.errors.DatasetError,
                       match=f"downloaded {first.stat().st_size + 1:,} bytes"):
        list(ds)
