"""Shard sizes are a hard bound; verify's messages name what they can."""

import tarfile

import pytest

from conftest import run


@pytest.mark.parametrize("size", ["12000", "50000", "20KiB"])
def test_no_shard_passes_the_shard_size(size, image_folder, tmp_path):
    sizes = {}
    for workers in ("1", "2"):
        out = tmp_path / f"w{workers}"
        run("pack", image_folder, "-o", out, "--shard-size", size, "-j", workers, "-q")
        sizes[workers] = {p.name: p.read_bytes() for p in out.glob("*.tar")}
    assert sizes["1"] == sizes["2"] and len(sizes["1"]) > 1
    bound = {"12000": 12000, "50000": 50000, "20KiB": 20480}[size]
    assert max(len(data) for data in sizes["1"].values()) <= bound
    assert "OK" in run("verify", tmp_path / "w1", "-q").output


def test_a_tiny_shard_size_is_refused(image_folder, tmp_path):
    result = run("pack", image_folder, "-o", tmp_path / "o", "--shard-size", "0", expect=2)
    assert "at least 10KiB" in result.output


def test_verify_says_one_problem_and_why_it_cannot_name_the_sample(image_folder, tmp_path):
    out = tmp_path / "w"
    run("pack", image_folder, "-o", out, "-q")
    shard = out / "shard-000000.tar"
    with tarfile.open(shard) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith(".jpg"))
    data = bytearray(shard.read_bytes())
    data[member.offset_data + 100] ^= 1
    shard.write_bytes(bytes(data))
    result = run("verify", out, "-q", expect=1)
    assert "FAILED: 2 problems" in result.output
    assert "--against SOURCE` is what names a changed file" in result.output
    result = run("verify", out, "--against", image_folder, "-q", expect=1)
    assert "bird/percent%20x.jpg: packed bytes differ from the source file" in result.output


def test_verify_against_a_table_says_what_against_takes(tmp_path):
    table = tmp_path / "t.csv"
    table.write_text("a,y\n1,x\n2,y\n")
    run("pack", table, "--label-column", "y", "-o", tmp_path / "w", "-q")
    result = run("verify", tmp_path / "w", "--against", table, expect=2)
    assert "--against takes the source folder of a dataset packed from files" in result.output
