"""The README and docs/ stay true: every ```sh and ```python block in them runs, on small
data made here under the names the pages use, and docs/cli.md is what --help says.

A block whose fence has no language (a folder layout, an error message, a command that
needs a cluster or a second machine) is shown, not run.
"""

import os
import shutil
import struct
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest

from conftest import colour_images
from s3_server import aws_environment

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BIN = Path(sys.executable).parent
# The packed datasets that a page reads without packing them itself.
PREPACKED = {
    "reading.md": ["webdataset"],
    "training.md": ["webdataset"],
    "datasets.md": ["webdataset", "lmdb", "hdf5"],
    "formats.md": ["webdataset", "lmdb", "hdf5", "tfrecord"],
}
PACKED_NAME = {"webdataset": "images-wds", "lmdb": "images.lmdb", "hdf5": "images.h5",
               "tfrecord": "images-tfr"}


def blocks(page: Path) -> list[tuple[str, str]]:
    """The (language, text) of each fenced block that is run: sh and python."""
    found, language, lines = [], None, []
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            if language is None:
                language, lines = line[3:].strip() or "-", []
            else:
                if language in ("sh", "python"):
                    found.append((language, "\n".join(lines) + "\n"))
                language = None
        elif language is not None:
            lines.append(line)
    return found


def imu_dump(path: Path, records: int = 5000) -> None:
    """A dump as the shipped `imu` spec describes it: a 64-byte header, 36-byte records."""
    rng = np.random.default_rng(0)
    header = b"IMU1" + struct.pack("<II", records, 100)
    record = np.dtype([("t", "<u8"), ("accel", "<f4", 3), ("gyro", "<f4", 3),
                       ("status", "<u2"), ("pad", "V2")])
    rows = np.zeros(records, record)
    rows["t"] = np.arange(records) * 10_000_000
    rows["accel"] = rng.normal(0, 1, (records, 3))
    rows["gyro"] = rng.normal(0, 1, (records, 3))
    rows["status"] = rng.integers(0, 3, records)
    path.write_bytes(header.ljust(64, b"\0") + rows.tobytes())


def mnist_files(folder: Path, count: int = 40) -> None:
    rng = np.random.default_rng(1)
    images = rng.integers(0, 255, (count, 28, 28), dtype=np.uint8)
    (folder / "train-images-idx3-ubyte").write_bytes(
        struct.pack(">IIII", 0x803, count, 28, 28) + images.tobytes())
    (folder / "train-labels-idx1-ubyte").write_bytes(
        struct.pack(">II", 0x801, count) + (np.arange(count) % 10).astype(np.uint8).tobytes())


def wav_file(path: Path, frames: int, rng) -> None:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(8000)
        out.writeframes(rng.integers(-3000, 3000, frames, dtype=np.int16).tobytes())


def wav_folder(folder: Path) -> None:
    rng = np.random.default_rng(2)
    wav_file(folder.parent / "long.wav", 40_000, rng)
    for label in ("dog", "cat"):
        (folder / label).mkdir(parents=True)
        for i in range(4):
            wav_file(folder / label / f"{i}.wav", 800, rng)


def tables(folder: Path) -> None:
    import pandas as pd

    rng = np.random.default_rng(3)
    frame = pd.DataFrame(rng.normal(0, 1, (60, 4)), columns=["radius", "texture", "area",
                                                             "smoothness"])
    frame["diagnosis"] = np.where(frame["radius"] > 0, "malignant", "benign")
    frame.to_excel(folder / "export.xlsx", index=False)
    big = pd.DataFrame(rng.normal(0, 1, (200, 3)), columns=["f1", "f2", "f3"])
    big["y"] = (big["f1"] > 0).astype(int)
    big.to_csv(folder / "big.csv", index=False)


@pytest.fixture(scope="module")
def base_data(tmp_path_factory) -> Path:
    """The inputs that the pages name: ./images, imu.bin and imu.toml, MNIST's files,
    ./wavs and long.wav, export.xlsx, big.csv."""
    base = tmp_path_factory.mktemp("doc-data")
    colour_images(base / "images", [(200, 30, 30), (30, 200, 30), (30, 30, 200)], 40, 20.0)
    imu_dump(base / "imu.bin")
    shutil.copy(ROOT / "packer" / "sources" / "binary" / "specs" / "imu.toml", base / "imu.toml")
    mnist_files(base)
    wav_folder(base / "wavs")
    tables(base)
    return base


def run_block(language: str, text: str, cwd: Path, env=None) -> subprocess.CompletedProcess:
    env = {**os.environ, **(env or {}), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    command = (["bash", "-eu", "-c", text] if language == "sh"
               else [sys.executable, "-c", text])
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def bucket_for_storage_page(endpoint: str, work: Path) -> dict[str, str]:
    """The AWS variables for the moto server, with `bucket` made and two plain shards
    in it under `shards/`, as the storage page reads them."""
    import boto3

    env = {**aws_environment(endpoint, work), "XDG_CACHE_HOME": str(work / "cache-home")}
    s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                      aws_secret_access_key="testing", region_name="us-east-1")
    s3.create_bucket(Bucket="bucket")
    done = run_block("sh", "packer pack ./images -o shards-src --shard-size 40KB -q", work)
    assert done.returncode == 0, done.stderr
    for name in ("shard-000000.tar", "shard-000001.tar"):
        s3.upload_file(str(work / "shards-src" / name), "bucket", f"shards/{name}")
    return env


def prepare(page: Path, base: Path, work: Path) -> None:
    shutil.copytree(base, work)
    for fmt in PREPACKED.get(page.name, []):
        done = run_block("sh", f"packer pack ./images --to {fmt} -o {PACKED_NAME[fmt]} -q",
                         work)
        assert done.returncode == 0, done.stderr
    if page.name == "formats.md":
        done = run_block("sh", "packer pack imu.bin --spec imu --to hdf5 -o imu.h5 -q", work)
        assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p)], ids=lambda p: p.name)
def test_every_snippet_of_the_page_runs(page, base_data, tmp_path, request):
    work = tmp_path / "work"
    prepare(page, base_data, work)
    env = (bucket_for_storage_page(request.getfixturevalue("moto_server"), work)
           if page.name == "storage.md" else None)
    for number, (language, text) in enumerate(blocks(page), 1):
        done = run_block(language, text, work, env)
        assert done.returncode == 0, (f"{page.name}, {language} block {number} failed:\n"
                                      f"{text}\n--- stdout\n{done.stdout[-3000:]}\n"
                                      f"--- stderr\n{done.stderr[-3000:]}")


def test_the_pages_have_snippets_that_run():
    """The runner does run something: the README and the reading pages have blocks."""
    assert {p.name for p in PAGES if blocks(p)} >= {"README.md", "reading.md", "formats.md",
                                                     "tables.md", "binary.md"}


def test_the_command_reference_is_what_help_says():
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "cli_reference.py"),
                           "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
