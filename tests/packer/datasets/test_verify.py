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
    assert "OK: 2 samples" in run("verify", tmp_path / "w", "--against", table).output
    result = run("verify", tmp_path / "w", "--against", tmp_path, expect=2)
    assert "not a file; this dataset was packed from a table, so --against takes that file" \
        in result.output


def test_fields_that_differ_only_in_case_are_never_one_sample(tmp_path):
    import webdataset

    from conftest import image_bytes

    folder = tmp_path / "pairs"
    folder.mkdir()
    (folder / "x.jpg").write_bytes(image_bytes(1))
    (folder / "x.JPG").write_bytes(image_bytes(2))
    (folder / "x.png").write_bytes(image_bytes(3, "PNG"))
    out = run("pack", folder, "-o", tmp_path / "wds", "--group-by-stem", "--unlabelled").output
    assert "extensions that differ only in case" in out
    samples = list(webdataset.WebDataset(str(tmp_path / "wds" / "shard-000000.tar"),
                                         shardshuffle=False))
    assert sorted(s["__key__"] for s in samples) == ["x~JPG", "x~jpg", "x~png"]


@pytest.mark.parametrize("command", [("inspect",), ("verify",), ("unpack", "-o", "restored")])
def test_a_missing_dataset_is_a_usage_error(command, tmp_path):
    out = run(command[0], tmp_path / "nope", *command[1:], expect=2).output
    assert "no such packed dataset" in out and "Traceback" not in out


def test_a_labels_file_inside_the_folder_is_named_as_ignored(tmp_path):
    from conftest import image_bytes

    folder = tmp_path / "flat"
    folder.mkdir()
    (folder / "a.jpg").write_bytes(image_bytes(1))
    (folder / ".DS_Store").write_bytes(b"junk")
    (folder / "labels.csv").write_text("filename,label\na.jpg,cat\n")
    out = run("pack", folder, "--labels", folder / "labels.csv", "-o", tmp_path / "o").output
    assert "ignored 1 hidden or OS junk file and the labels file" in out
