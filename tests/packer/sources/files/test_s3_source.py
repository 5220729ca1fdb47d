"""Packing a folder of files that lives in object storage (`packer pack s3://bucket/prefix`)
on a real S3-compatible server (moto's, on 127.0.0.1): the same samples, bytes and
manifest as a pack of the same files in a local folder, and one clear message for each
way the store or the objects can fail."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from dumps import write_imu

import packer
from conftest import KILL_AFTER_TWO_PARTS, image_bytes, run
from packer.storage.client import client
from s3_server import free_port, point_at, start_server, stop_server, upload_folder

BYTE_REPRODUCIBLE = ("webdataset", "tfrecord")


def data_files(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and p.name != "manifest.json"}


def comparable(manifest: dict) -> dict:
    """The manifest less its time, its digest, where its source was and how long its
    scan took."""
    manifest = {k: v for k, v in manifest.items() if k not in ("created", "manifest_sha256")}
    manifest["source"] = {k: v for k, v in manifest["source"].items()
                          if k not in ("path", "labels_file", "scan_seconds")}
    return manifest


@pytest.fixture
def mixed_folder(image_folder):
    """The image folder with what a scan skips or ignores: a corrupt JPEG, an empty
    file, hidden files and OS junk."""
    (image_folder / "cat" / "broken.jpg").write_bytes(b"not a jpeg at all")
    (image_folder / "dog" / "empty.png").write_bytes(b"")
    (image_folder / "dog" / ".DS_Store").write_bytes(b"junk")
    (image_folder / "bird" / "Thumbs.db").write_bytes(b"junk")
    return image_folder


def same_as_local(folder: Path, url: str, tmp_path: Path, *args) -> dict:
    """Pack the folder and its copy at `url` with the same options: the same bytes and
    manifest; returns the manifest of the s3 pack."""
    run("pack", folder, "-o", tmp_path / "local", "-q", *args)
    result = run("pack", url, "-o", tmp_path / "remote", *args)
    local, remote = (packer.load_manifest(tmp_path / name) for name in ("local", "remote"))
    assert comparable(remote) == comparable(local)
    assert remote["source"]["path"] == url
    if remote["format"] in BYTE_REPRODUCIBLE:
        assert data_files(tmp_path / "remote") == data_files(tmp_path / "local")
    assert list(packer.iter_samples(tmp_path / "remote")) == list(
        packer.iter_samples(tmp_path / "local"))
    assert "Traceback" not in result.output
    return remote


@pytest.mark.parametrize("fmt", ["webdataset", "tfrecord", "lmdb", "hdf5"])
def test_a_prefix_packs_as_the_same_local_folder(s3, mixed_folder, tmp_path, fmt):
    upload_folder(mixed_folder, s3, "data/images")
    manifest = same_as_local(mixed_folder, f"s3://{s3}/data/images", tmp_path, "--to", fmt,
                             "--max-count", "5")
    assert manifest["classes"] == ["bird", "cat", "dog"]
    assert {e["path"] for e in manifest["skipped"]} >= {"cat/broken.jpg", "dog/empty.png"}
    assert {e["path"] for e in manifest["ignored"]} >= {"dog/.DS_Store", "bird/Thumbs.db"}


def test_workers_resize_and_checks_read_the_objects_themselves(s3, mixed_folder, tmp_path):
    upload_folder(mixed_folder, s3, "images")
    same_as_local(mixed_folder, f"s3://{s3}/images", tmp_path, "--workers", "2", "--check",
                  "decode", "--resize", "8", "--encode", "png")


def test_a_labels_csv_at_the_top_of_the_prefix(s3, tmp_path):
    flat = tmp_path / "flat"
    flat.mkdir()
    for i in range(6):
        (flat / f"{i}.jpg").write_bytes(image_bytes(i))
    (flat / "labels.csv").write_text("filename,label\n" + "".join(
        f"{i}.jpg,{'ab'[i % 2]}\n" for i in range(5)))
    upload_folder(flat, s3, "flat")
    manifest = same_as_local(flat, f"s3://{s3}/flat", tmp_path)
    assert manifest["classes"] == ["a", "b"] and manifest["count"] == 5
    assert manifest["source"]["labels_file"] == f"s3://{s3}/flat/labels.csv"
    assert manifest["skipped"] == [{"path": "5.jpg", "reason": "no label in labels.csv"}]
    labels = tmp_path / "mine.csv"
    labels.write_text("".join(f"{i}.jpg,{i % 3}\n" for i in range(6)))
    given = run("pack", f"s3://{s3}/flat", "-o", tmp_path / "given", "--labels", labels, "-q")
    assert "Traceback" not in given.output
    assert packer.load_manifest(tmp_path / "given")["count"] == 6


def test_an_s3_prefix_into_an_s3_output(s3, image_folder, tmp_path):
    upload_folder(image_folder, s3, "in")
    run("pack", image_folder, "-o", tmp_path / "local", "-q")
    run("pack", f"s3://{s3}/in", "-o", f"s3://{s3}/out", "-q")
    assert list(packer.iter_samples(f"s3://{s3}/out")) == list(
        packer.iter_samples(tmp_path / "local"))


def test_objects_that_change_after_the_listing_are_skipped_with_the_reason(
        s3, image_folder, tmp_path, monkeypatch):
    import packer.sources.files.objects as objects

    upload_folder(image_folder, s3, "moving")
    listing = objects.list_prefix

    def list_then_change(url, notes):
        tree = listing(url, notes)
        client().delete_object(Bucket=s3, Key="moving/cat/plain.jpg")
        client().put_object(Bucket=s3, Key="moving/dog/mask.png", Body=image_bytes(1, "PNG"))
        return tree

    monkeypatch.setattr(objects, "list_prefix", list_then_change)
    run("pack", f"s3://{s3}/moving", "-o", tmp_path / "out", "-q")
    skipped = {e["path"]: e["reason"] for e in packer.load_manifest(tmp_path / "out")["skipped"]}
    assert skipped["cat/plain.jpg"] == "deleted after the prefix was listed"
    assert skipped["dog/mask.png"].startswith("changed after the prefix was listed")
    upload_folder(image_folder, s3, "moving")  # as it was, to change again once listed
    failed = run("pack", f"s3://{s3}/moving", "-o", tmp_path / "fail", "-q", "--on-error",
                 "fail", expect=1)
    assert f"s3://{s3}/moving/cat/plain.jpg: deleted after" in failed.output


def test_resume_refuses_an_object_changed_since_the_run_began(s3, image_folder, tmp_path):
    upload_folder(image_folder, s3, "resumed")
    out = tmp_path / "out"
    args = ["pack", f"s3://{s3}/resumed", "-o", str(out), "--max-count", "3", "-q"]
    killed = subprocess.run([sys.executable, "-c", KILL_AFTER_TWO_PARTS, *args])
    assert killed.returncode != 0 and not out.exists()
    first = sorted(json.loads(p.read_text()) for p in (tmp_path / "out.partial").glob(
        "progress.json"))[0]["tally"]["next_input"]
    assert first > 0
    client().put_object(Bucket=s3, Key="resumed/bird/plain.jpg", Body=image_bytes(99))
    refused = run(*args, "--resume", expect=2)
    assert "the input changed since the interrupted run" in refused.output
    assert "--overwrite" in refused.output and "Traceback" not in refused.output


def test_resume_continues_an_unchanged_prefix(s3, image_folder, tmp_path):
    upload_folder(image_folder, s3, "again")
    out = tmp_path / "out"
    args = ["pack", f"s3://{s3}/again", "-o", str(out), "--max-count", "3", "-q"]
    subprocess.run([sys.executable, "-c", KILL_AFTER_TWO_PARTS, *args])
    assert "packing again from the start" not in run(*args, "--resume").output
    run("pack", image_folder, "-o", tmp_path / "local", "--max-count", "3", "-q")
    assert data_files(out) == data_files(tmp_path / "local")


def test_a_missing_bucket_or_prefix_is_one_clear_error(s3, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    missing = run("pack", "s3://no-such-bucket/x", "-o", tmp_path / "o", expect=1)
    assert "s3://no-such-bucket/x: no such bucket" in missing.output
    empty = run("pack", f"s3://{s3}/nothing", "-o", tmp_path / "o", expect=2)
    assert f"s3://{s3}/nothing: no objects under this prefix" in empty.output
    client().put_object(Bucket=s3, Key="photo.jpg", Body=image_bytes(1))
    one = run("pack", f"s3://{s3}/photo.jpg", "-o", tmp_path / "o", expect=2)
    assert f"s3://{s3}/photo.jpg: from object storage packer packs a prefix" in one.output
    client().put_object(Bucket=s3, Key="dumps/d.bin", Body=b"IMU1")
    folder = run("pack", f"s3://{s3}/dumps", "--spec", "imu", "-o", tmp_path / "o", expect=2)
    assert "copy anything else first" in folder.output
    for result in (missing, empty, one, folder):
        assert "Traceback" not in result.output
    assert not (tmp_path / "s3:").exists() and not (tmp_path / "o").exists()


def test_wrong_credentials_are_one_clear_error(tmp_path, monkeypatch):
    server, endpoint = start_server(INITIAL_NO_AUTH_ACTION_COUNT="0")  # checks every key
    try:
        point_at(monkeypatch, endpoint, tmp_path)
        result = run("pack", "s3://bucket/images", "-o", tmp_path / "o", expect=1)
        assert "s3://bucket/images: the object store" in result.output
        assert "refused the credentials" in result.output and "Traceback" not in result.output
    finally:
        stop_server(server)


def test_an_unreachable_endpoint_is_one_clear_error(tmp_path, monkeypatch):
    point_at(monkeypatch, f"http://127.0.0.1:{free_port()}", tmp_path)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    result = run("pack", "s3://bucket/images", "-o", tmp_path / "o", expect=1)
    assert "s3://bucket/images: cannot reach the object store" in result.output
    assert not (tmp_path / "o").exists()


def test_pack_help_shows_an_s3_source():
    assert "s3://BUCKET/PREFIX" in run("pack", "--help").output.split("Options:")[0]


def test_a_table_and_a_dump_in_a_bucket_pack_from_a_checked_copy(s3, tmp_path):
    table = tmp_path / "visits.csv"
    table.write_text("a,b,y\n" + "".join(f"{i},{i * 2},{i % 2}\n" for i in range(30)))
    dump = tmp_path / "imu.bin"
    write_imu(dump, 20, "little")
    upload_folder(tmp_path, s3, "files")
    for name, args in (("visits.csv", ["--label-column", "y", "--to", "hdf5"]),
                       ("imu.bin", ["--spec", "imu", "--to", "webdataset"])):
        run("pack", tmp_path / name, "-o", tmp_path / f"{name}.local", "-q", *args)
        url = f"s3://{s3}/files/{name}"
        run("pack", url, "-o", tmp_path / f"{name}.remote", "-q", *args)
        local, remote = (packer.load_manifest(tmp_path / f"{name}.{where}")
                         for where in ("local", "remote"))
        assert remote["source"]["path"] == url
        assert comparable(remote) == comparable(local)  # the parts' samples_sha256 too
        if remote["format"] in BYTE_REPRODUCIBLE:
            assert data_files(tmp_path / f"{name}.remote") == data_files(
                tmp_path / f"{name}.local")
    assert not list((tmp_path / "cache-home" / "packer" / "sources").glob("*/*"))


def test_a_copy_that_is_not_the_object_is_one_clear_error(s3, tmp_path, monkeypatch):
    import packer.storage.fetch as fetch

    client().put_object(Bucket=s3, Key="t.csv", Body=b"a,y\n1,0\n2,1\n")

    def damaged(url, file):
        file.write(b"a,y\n1,0\n2,2\n")
        return 12, "0" * 64

    monkeypatch.setattr(fetch, "download", damaged)
    result = run("pack", f"s3://{s3}/t.csv", "--label-column", "y", "-o", tmp_path / "o",
                 expect=1)
    assert f"s3://{s3}/t.csv: the copy downloaded (12 bytes) is not the object" in result.output
    assert not (tmp_path / "o").exists()
    assert not list((tmp_path / "cache-home" / "packer" / "sources").rglob("t.csv*"))


def test_split_folders_in_a_prefix_split_as_a_local_folder(s3, tmp_path):
    root = tmp_path / "split"
    for split, count in (("train", 4), ("val", 2)):
        for c, name in enumerate(("cat", "dog")):
            (root / split / name).mkdir(parents=True)
            for i in range(count):
                (root / split / name / f"{i}.jpg").write_bytes(image_bytes(c * 50 + i
                                                                           + 10 * count))
    shutil.copy(root / "train" / "dog" / "1.jpg", root / "val" / "cat" / "copy.jpg")
    upload_folder(root, s3, "split")
    manifest = same_as_local(root, f"s3://{s3}/split", tmp_path, "--dedupe")
    assert manifest["classes"] == ["cat", "dog"]
    assert {name: s["count"] for name, s in manifest["splits"]["sets"].items()} == {
        "train": 8, "val": 4}  # the copy in val/ repeats train's, and is stored once
    assert manifest["skipped"] == [{"path": "val/cat/copy.jpg", "reason": "an exact duplicate "
                                    "of train/dog/1.jpg, which has another label (--dedupe)"}]
