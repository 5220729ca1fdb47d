"""Plain WebDataset shards from other tools, over local paths, http:// and pipe:."""

import socket
import subprocess
import sys
import time

import pytest
import torch
import webdataset

import packer


@pytest.fixture(scope="module")
def plain_shards(tmp_path_factory):
    folder = tmp_path_factory.mktemp("plain")
    with webdataset.ShardWriter(str(folder / "f-%06d.tar"), maxcount=9, verbose=0) as sink:
        for i in range(40):
            sink.write({"__key__": f"s{i:03d}", "txt": f"text {i}", "cls": i % 4})
    return folder


def all_keys(ds, workers=2):
    loader = torch.utils.data.DataLoader(ds, batch_size=5, num_workers=workers)
    return sorted(k for batch in loader for k in batch["__key__"])


EXPECTED = [f"s{i:03d}" for i in range(40)]


def test_shardwriter_shards_by_folder_and_brace_pattern(plain_shards):
    by_folder = packer.open_dataset(plain_shards, shuffle=True)
    assert len(by_folder) == 40 and all_keys(by_folder) == EXPECTED
    pattern = str(plain_shards / "f-{000000..000004}.tar")
    sample = next(iter(packer.open_dataset(pattern)))
    assert sample == {"__key__": "s000", "txt": "text 0", "cls": 0}


def test_names_with_pattern_characters_are_the_files_they_name(image_folder, tmp_path):
    """A dataset or a shard whose name holds [ ] ( ) + is opened as named, not as a
    glob (which matched nothing, and then read the HDF5 file as a tar)."""
    from conftest import run

    for name, fmt in (("a+b(1)[x].h5", "hdf5"), ("c[1]", "lmdb"), ("d[2]", "webdataset")):
        run("pack", image_folder, "-o", tmp_path / name, "--to", fmt, "-q")
        assert "OK: 27 samples" in run("verify", tmp_path / name).output
        assert len(list(packer.open_dataset(tmp_path / name, decode="raw"))) == 27
        assert '"count": 27' in run("inspect", tmp_path / name, "--json").output
    shard = tmp_path / "e[3].tar"
    shard.write_bytes((tmp_path / "d[2]" / "shard-000000.tar").read_bytes())
    assert len(list(packer.open_dataset(str(shard), decode="raw"))) == 27
    (tmp_path / "d[2]" / "shard-000000.tar").unlink()
    assert "shard-000000.tar: missing" in run("inspect", tmp_path / "d[2]", expect=1).output


def test_pipe_urls(plain_shards):
    urls = [f"pipe:cat {p}" for p in sorted(plain_shards.glob("*.tar"))]
    ds = packer.open_dataset(urls, shuffle=True, seed=1)
    assert len(ds) == 40 and all_keys(ds) == EXPECTED


def test_http_urls_from_a_local_server(plain_shards):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind",
                               "127.0.0.1", "--directory", str(plain_shards)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        url = f"http://127.0.0.1:{port}/f-{{000000..000004}}.tar"
        for rank in range(2):
            ds = packer.open_dataset(url, rank=rank, world_size=2, shuffle=True)
            assert len(ds) == 20
        ds = packer.open_dataset(url, shuffle=True)
        assert all_keys(ds) == EXPECTED
    finally:
        server.terminate()
        server.wait()


def test_missing_shards_and_paths_are_clear_errors(plain_shards, tmp_path):
    with pytest.raises(packer.errors.DatasetError, match="no such shard"):
        packer.open_dataset(str(plain_shards / "f-{000000..000009}.tar"))
    with pytest.raises(packer.errors.DatasetError, match="no such packed dataset"):
        packer.open_dataset(tmp_path / "nothing")
    with pytest.raises(packer.errors.DatasetError, match="not a packed dataset"):
        packer.open_dataset(tmp_path)


def test_an_lmdb_the_user_holds_open_gets_a_clear_error(tmp_path):
    import lmdb

    from conftest import image_bytes, run
    from packer.errors import DatasetError

    images = tmp_path / "images"
    (images / "a").mkdir(parents=True)
    (images / "a" / "x.jpg").write_bytes(image_bytes(0))
    run("pack", images, "--to", "lmdb", "-o", tmp_path / "db", "-q")
    env = lmdb.open(str(tmp_path / "db"), readonly=True, lock=False)
    try:
        with pytest.raises(DatasetError, match="close your own lmdb.open"):
            next(iter(packer.open_dataset(tmp_path / "db")))
    finally:
        env.close()
    assert next(iter(packer.open_dataset(tmp_path / "db")))["cls"] == 0


def _compressed_copies(plain_shards, folder):
    """The plain shards again, as .tar.gz, .tgz, .tar.bz2 and .tar.xz files."""
    import bz2
    import gzip
    import lzma

    folder.mkdir()
    writers = [(".tar.gz", gzip.compress), (".tgz", gzip.compress),
               (".tar.bz2", bz2.compress), (".tar.xz", lzma.compress)]
    for number, shard in enumerate(sorted(plain_shards.glob("*.tar"))):
        suffix, compress = writers[number % len(writers)]
        (folder / f"c-{number}{suffix}").write_bytes(compress(shard.read_bytes()))
    return folder


def test_compressed_shards_are_streamed(plain_shards, tmp_path):
    folder = _compressed_copies(plain_shards, tmp_path / "compressed")
    ds = packer.open_dataset(folder, shuffle=True)
    assert len(ds) == 40 and all_keys(ds) == EXPECTED
    one = packer.open_dataset(folder / "c-0.tar.gz")
    assert next(iter(one)) == {"__key__": "s000", "txt": "text 0", "cls": 0}


def test_a_tar_that_is_not_one_and_a_cut_tgz_are_errors_naming_them(tmp_path):
    import gzip

    from conftest import run

    (tmp_path / "notes.tar").write_text("these are notes, not a tar archive\n" * 20)
    with pytest.raises(packer.errors.DatasetError, match=r"notes.tar: not a tar file: it "
                       r"starts with 74 68 65 73"):
        packer.open_dataset(tmp_path / "notes.tar")
    (tmp_path / "h5.tar").write_bytes(b"\x89HDF\r\n\x1a\n" + b"\xff" * 504)
    with pytest.raises(packer.errors.DatasetError, match="h5.tar: not a tar file"):
        packer.open_dataset(tmp_path / "h5.tar")
    whole = gzip.compress(bytes(10240))
    (tmp_path / "cut.tgz").write_bytes(whole[:len(whole) // 2])
    with pytest.raises(packer.errors.DatasetError, match="cut.tgz: cannot be read through"):
        packer.open_dataset(tmp_path / "cut.tgz")
    out = run("inspect", tmp_path / "notes.tar", expect=1).output
    assert "notes.tar: not a tar file" in out and "Traceback" not in out


def test_inspect_shows_plain_shards(plain_shards, tmp_path):
    import json

    from conftest import run

    text = run("inspect", plain_shards).output
    assert "WebDataset shards without a packer manifest, 40 samples in 5 shards" in text
    assert "f-000004.tar: 4 samples" in text
    folder = _compressed_copies(plain_shards, tmp_path / "compressed")
    shown = json.loads(run("inspect", str(folder / "c-*"), "--json").output)
    assert shown["count"] == 40 and shown["fields"]["txt"]["count"] == 40
    assert [part["streamed"] for part in shown["parts"]] == [True] * 5
