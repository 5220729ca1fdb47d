"""`packer unpack`, `inspect`, `verify` and `bench` on s3:// datasets and plain
shards, and open_dataset of a list of s3:// shards, on a real S3-compatible server
(moto's, on 127.0.0.1)."""

import json
import tarfile
from pathlib import Path

import pytest

import packer
from conftest import image_bytes, run, source_files
from packer.formats import FORMAT_NAMES
from packer.storage.cache import TEMP_MARK, PartCache
from packer.storage.client import StorageError, client

SHARDS = 4


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("s3-commands") / "images"
    for i in range(SHARDS * 8):
        folder = root / f"c{i % 2}" / ("deep" if i % 3 == 0 else "")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{i:03d}.jpg").write_bytes(image_bytes(i, size=(12 + i % 5, 10)))
    return root


@pytest.fixture(scope="module")
def local_wds(images) -> Path:
    out = images.parent / "wds"
    run("pack", images, "-o", out, "--max-count", "8", "-q")
    return out


@pytest.fixture
def plain(s3, local_wds) -> str:
    """The shards of `local_wds` put in the bucket as another tool would: no manifest."""
    for shard in sorted(local_wds.glob("*.tar")):
        client().upload_file(str(shard), s3, f"plain/{shard.name}")
    return f"s3://{s3}/plain"


def members(shards: list[Path]) -> dict[str, bytes]:
    """Every member of the tar files, by name."""
    found = {}
    for shard in shards:
        with tarfile.open(shard) as tar:
            for member in tar.getmembers():
                found[member.name] = tar.extractfile(member).read()
    return found


def cached_files(cache: Path) -> list[Path]:
    return [p for p in (cache / "parts").rglob("*") if p.is_file()]


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_unpack_from_a_bucket_gives_the_source_files_back(s3, images, tmp_path, fmt):
    url = f"s3://{s3}/{fmt}"
    run("pack", images, "--to", fmt, "-o", url, "-q")
    cache = tmp_path / "cache"
    result = run("unpack", url, "-o", tmp_path / "out", "--cache-dir", cache, "--json")
    assert json.loads(result.output)["samples"] == SHARDS * 8
    assert source_files(tmp_path / "out") == source_files(images)
    assert cached_files(cache)  # read through the cache that was named
    marker = json.loads((tmp_path / "out" / ".packer-unpack.json").read_text())
    assert marker["dataset"] == url


def test_unpack_plain_shards_in_a_bucket_gives_their_members(plain, local_wds, tmp_path):
    expected = members(sorted(local_wds.glob("*.tar")))
    run("unpack", plain, "-o", tmp_path / "out", "--cache-dir", tmp_path / "cache", "-q")
    assert source_files(tmp_path / "out") == expected
    two = f"{plain}/shard-{{000000..000001}}.tar"
    run("unpack", two, "-o", tmp_path / "two", "-q")
    assert source_files(tmp_path / "two") == members(sorted(local_wds.glob("*.tar"))[:2])


def test_unpack_local_plain_shards_gives_their_members(local_wds, tmp_path):
    folder = tmp_path / "plain"
    folder.mkdir()
    for shard in local_wds.glob("*.tar"):
        (folder / shard.name).write_bytes(shard.read_bytes())
    run("unpack", folder, "-o", tmp_path / "out", "-q")
    assert source_files(tmp_path / "out") == members(sorted(folder.glob("*.tar")))


def test_unpack_of_shards_that_repeat_a_name_overwrites_nothing(local_wds, tmp_path):
    folder = tmp_path / "plain"
    folder.mkdir()
    shard = sorted(local_wds.glob("*.tar"))[0]
    for name in ("a.tar", "b.tar"):  # the same members twice
        (folder / name).write_bytes(shard.read_bytes())
    result = run("unpack", folder, "-o", tmp_path / "out", "-q", expect=1)
    assert "two members of the dataset have this name" in result.output
    assert not (tmp_path / "out").exists()


def test_unpack_errors_name_the_url(s3, tmp_path):
    for url, status, text in ((f"s3://{s3}/nothing", 2, "no such dataset"),
                              ("s3://no-such-bucket/x", 1, "no such bucket")):
        result = run("unpack", url, "-o", tmp_path / "out", expect=status)
        assert url in result.output and text in result.output
        assert "Traceback" not in result.output and not (tmp_path / "out").exists()
    result = run("unpack", f"s3://{s3}/x", "-o", tmp_path / "o", "--cache-limit", "9QB",
                 expect=2)
    assert "--cache-limit" in result.output and "not a size" in result.output


def test_inspect_verify_and_bench_plain_shards_in_a_bucket(plain, local_wds, tmp_path):
    cache = tmp_path / "cache"
    shards = json.loads(run("inspect", plain, "--json", "--cache-dir", cache).output)
    assert shards["count"] == SHARDS * 8 and shards["manifest"] is None
    assert [p["name"] for p in shards["parts"]] == [f"{plain}/{p.name}" for p in
                                                     sorted(local_wds.glob("*.tar"))]
    assert shards["fields"]["jpg"]["count"] == SHARDS * 8 and cached_files(cache)
    result = run("verify", plain, expect=1)
    assert f"{plain}: WebDataset shards, not a packed dataset" in result.output
    report = tmp_path / "bench.json"
    run("bench", plain, "--workers", "0", "--repeat", "1", "--no-decode", "--cold",
        "--cache-dir", cache, "--json", report)
    figures = json.loads(report.read_text())
    assert {r["cache"] for r in figures["results"]} == {"warm", "cold"}
    assert all(r["samples"] == SHARDS * 8 for r in figures["results"])
    assert figures["stored"][plain]["bytes"] == sum(p.stat().st_size
                                                    for p in local_wds.glob("*.tar"))


def test_bench_reports_what_an_s3_dataset_stores(s3, local_wds, tmp_path):
    url = f"s3://{s3}/packed"
    for path in local_wds.iterdir():
        client().upload_file(str(path), s3, f"packed/{path.name}")
    report = tmp_path / "bench.json"
    run("bench", url, "--workers", "0", "--repeat", "1", "--no-decode", "--json", report,
        "--cache-dir", tmp_path / "cache")
    stored = json.loads(report.read_text())["stored"][url]
    assert stored == {"bytes": sum(p.stat().st_size for p in local_wds.glob("*.tar")),
                      "images": "as packed"}


def shard_urls(plain: str, local_wds: Path) -> list[str]:
    return [f"{plain}/{p.name}" for p in sorted(local_wds.glob("*.tar"))]


def test_a_list_of_s3_shards_reads_every_sample_once_across_workers_and_ranks(
        plain, local_wds, tmp_path):
    expected = {s["__key__"]: s["jpg"] for s in packer.open_dataset(local_wds, decode="raw")}
    urls, cache = shard_urls(plain, local_wds), tmp_path / "cache"
    assert {s["__key__"]: s["jpg"] for s in
            packer.open_dataset(urls, decode="raw", cache_dir=cache)} == expected
    orders = []
    for epoch in range(2):
        keys = []
        for rank in range(2):
            ds = packer.open_dataset(urls, decode="raw", shuffle=True, rank=rank, world_size=2,
                                     remainder="drop", cache_dir=cache, unit=4)
            ds.set_epoch(epoch)
            keys += [k for batch in packer.DataLoader(ds, batch_size=5, num_workers=2)
                     for k in batch["__key__"]]
        assert sorted(keys) == sorted(expected)  # every sample once, on one rank
        orders.append(keys)
    assert orders[0] != orders[1]  # shuffled anew each epoch
    pattern = f"{plain}/shard-{{000000..{SHARDS - 1:06d}}}.tar"
    assert len(packer.open_dataset(pattern, decode="raw", cache_dir=cache)) == len(expected)
    assert len(list((cache / "parts").iterdir())) == 1  # the same shards, one cache folder


def test_a_list_of_s3_shards_within_a_small_cache(plain, local_wds, tmp_path):
    sizes = [p.stat().st_size for p in local_wds.glob("*.tar")]
    limit, cache = 2 * max(sizes) + min(sizes), tmp_path / "cache"
    ds = packer.open_dataset(shard_urls(plain, local_wds), decode="raw", shuffle=True,
                             cache_dir=cache, cache_limit=limit)
    assert not ds.source.seekable  # parts read whole, as for an s3:// folder that does not fit
    keys = [k for batch in packer.DataLoader(ds, batch_size=4, num_workers=2)
            for k in batch["__key__"]]
    assert len(keys) == len(set(keys)) == SHARDS * 8
    assert PartCache(cache, limit).usage() <= limit
    assert not list(cache.rglob(f"*{TEMP_MARK}*"))


def test_a_list_naming_a_dataset_or_a_missing_shard_is_a_clear_error(plain, s3, images,
                                                                      local_wds, tmp_path):
    run("pack", images, "-o", f"s3://{s3}/packed", "-q")
    first = f"{plain}/shard-000000.tar"
    cases = {(first, f"s3://{s3}/packed"): f"s3://{s3}/packed: a packed dataset, not a shard",
             (first, f"{plain}/shard-000009.tar"): f"{plain}/shard-000009.tar: no such shard",
             (first, str(local_wds / "shard-000000.tar")): "not an s3:// URL",
             (first, first): "named twice",
             (str(local_wds / "shard-000000.tar"), str(local_wds)):
                 f"{local_wds}: a packed dataset, not a folder of shards"}
    for urls, message in cases.items():
        with pytest.raises(packer.errors.PackerError) as failure:
            packer.open_dataset(list(urls), cache_dir=tmp_path / "cache")
        assert message in str(failure.value)
    with pytest.raises(StorageError, match="s3://no-such-bucket"):
        packer.open_dataset(["s3://no-such-bucket/x/shard-000000.tar"])


def test_a_list_of_local_shards(local_wds):
    urls = [str(p) for p in sorted(local_wds.glob("*.tar"))]
    assert len(packer.open_dataset(urls, decode="raw")) == SHARDS * 8
