"""Packing under faults: concurrent runs, orphaned workers, a full disk, a publish
that replaces a dataset; each ends complete or with one clear message, and nothing
that looks complete is ever wrong."""

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
from packer.errors import PackerError
from packer.formats.base import Chunk
from packer.formats.protocol import swap_in
from packer.packing import space
from packer.packing.lock import lock_path, output_lock
from packer.packing.work import unspool


def image_tree(root: Path, classes: list[str], per_class: int, size=(24, 20)) -> Path:
    for number, name in enumerate(classes):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            (root / name / f"{i}.jpg").write_bytes(image_bytes(number * 1000 + i, size=size))
    return root


def pack_process(source, out, *extra):
    return subprocess.Popen([sys.executable, "-m", "packer", "pack", str(source), "-o", str(out),
                             "-q", *map(str, extra)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_a_second_run_into_a_locked_output_is_refused(tmp_path):
    source = image_tree(tmp_path / "a", ["x"], 3)
    out = tmp_path / "out"
    with output_lock(out):
        result = run("pack", source, "-o", out, "--overwrite", "-q", expect=2)
    assert "another `packer pack` is writing this output now" in result.output
    assert not out.exists()
    run("pack", source, "-o", out, "-q")  # the lock went with its holder
    assert not lock_path(out).exists()


def test_two_overwrite_packs_into_one_output_never_publish_mixed_data(tmp_path):
    sources = {"a": image_tree(tmp_path / "a", ["apple", "avocado"], 150, size=(64, 48)),
               "b": image_tree(tmp_path / "b", ["banana", "blueberry", "beet"], 100)}
    out = tmp_path / "out"
    for _ in range(3):
        runs = {name: pack_process(src, out, "--overwrite", "--to", "lmdb")
                for name, src in sources.items()}
        codes = {name: proc.wait(120) for name, proc in runs.items()}
        assert sorted(codes.values()) in ([0, 0], [0, 2]), codes
        for name, proc in runs.items():
            if codes[name] == 2:
                assert "another `packer pack` is writing" in proc.stderr.read()
        assert packer.verify(out, progress=False)["ok"]
        manifest = packer.load_manifest(out)
        winner = "a" if manifest["classes"][0] == "apple" else "b"
        assert manifest["source"]["path"] == str(sources[winner].resolve())
        assert packer.verify(out, against=sources[winner], progress=False)["ok"]


def test_workers_die_with_the_main_process(tmp_path):
    # images large enough that decoding 2,000 takes the workers well past their set-up
    source = image_tree(tmp_path / "a", [f"c{i}" for i in range(4)], 300, size=(160, 120))
    proc = pack_process(source, tmp_path / "out", "--workers", "2", "--check", "decode")
    children = []
    for _ in range(600):  # until both workers are past their set-up, decoding
        children = [pid for pid in _children(proc.pid) if _cpu_ticks(pid) >= 5]
        if len(children) >= 2:
            break
        time.sleep(0.05)
    assert len(children) >= 2, "the pack started no workers"
    for pid in children:  # as if busy: a stopped worker would finish its chunk later
        os.kill(pid, signal.SIGSTOP)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_alive(pid) for pid in children):
            time.sleep(0.05)
        assert not any(_alive(pid) for pid in children), "an orphaned worker lives on"
    finally:
        for pid in children:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _cpu_ticks(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[11])
    except (FileNotFoundError, IndexError, ValueError):
        return 0


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def test_a_spool_file_that_another_process_wrote_is_refused(tmp_path):
    spool = tmp_path / "00000000"
    spool.write_bytes(b"x" * 10)  # what an orphaned worker of another run left
    chunk = Chunk(b"", [4, 6], b"", [], [], {}, {}, 2, spool=str(spool), spool_crc=123)
    with pytest.raises(PackerError, match="does not hold what its worker wrote"):
        unspool(chunk)


def test_each_run_spools_in_a_folder_of_its_own(tmp_path, monkeypatch):
    """A resumed run never reads a spool file named like one of an earlier run's."""
    source = image_tree(tmp_path / "a", ["x", "y"], 40)
    out = tmp_path / "out"
    partial = tmp_path / "out.partial"
    partial.mkdir()
    stale = partial / "spool" / "00000000"  # an earlier run's name for chunk 0
    stale.parent.mkdir()
    stale.write_bytes(b"not this run's bytes")
    run("pack", source, "-o", out, "--workers", "2", "--overwrite", "-q")
    assert packer.verify(out, against=source, progress=False)["ok"]


def test_swap_in_replaces_a_dataset_in_one_step_and_leaves_nothing_behind(tmp_path):
    old, new = tmp_path / "out", tmp_path / "out.partial"
    old.mkdir()
    (old / "manifest.json").write_text("old")
    new.mkdir()
    (new / "manifest.json").write_text("new")
    swap_in(new, old)
    assert (old / "manifest.json").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_unpack_into_the_dataset_itself_is_refused(tmp_path):
    source = image_tree(tmp_path / "a", ["x"], 2)
    run("pack", source, "-o", tmp_path / "ds", "-q")
    result = run("unpack", tmp_path / "ds", "-o", tmp_path / "ds" / "restored", expect=2)
    assert "inside the dataset" in result.output
    assert sorted(p.name for p in (tmp_path / "ds").iterdir()) == [
        "manifest.json", "shard-000000.idx", "shard-000000.tar"]


@pytest.fixture
def small_disk(tmp_path):
    """A 6 MB tmpfs (root can mount one; elsewhere the test is skipped)."""
    with tmpfs(tmp_path / "disk", "size=6m") as mount:
        yield mount


# "write-fails": no room check, as when the disk fills between the check and the write
# (HDF5, which crashed the process then, claims its blocks before each write)
@pytest.mark.parametrize(("fmt", "margin"), [
    ("webdataset", space.MARGIN), ("lmdb", space.MARGIN), ("hdf5", space.MARGIN),
    ("tfrecord", space.MARGIN), ("webdataset", -(1 << 60)), ("lmdb", -(1 << 60)),
    ("hdf5", -(1 << 60)), ("tfrecord", -(1 << 60))],
    ids=["webdataset", "lmdb", "hdf5", "tfrecord", "webdataset-write-fails",
         "lmdb-write-fails", "hdf5-write-fails", "tfrecord-write-fails"])
def test_a_full_disk_is_one_message_and_resume_finishes_the_pack(fmt, margin, small_disk,
                                                                 tmp_path):
    source = image_tree(tmp_path / "src", ["a", "b"], 350, size=(160, 120))
    out = small_disk / "out"
    # with no room check, the write itself meets the full disk
    main = (f"import packer.packing.space as s; s.MARGIN = {margin}; "
            "from packer.cli import main; main()")
    command = [sys.executable, "-c", main, "pack", str(source), "-o", str(out), "--to", fmt,
               "-q", *(["--shard-size", "1MB"] if fmt in ("webdataset", "tfrecord") else [])]
    failed = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert failed.returncode == 1, (failed.returncode, failed.stderr)
    assert "the disk is full" in failed.stderr and "--resume" in failed.stderr
    assert "Traceback" not in failed.stderr
    assert not out.exists()
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    resumed = subprocess.run([*command, "--resume"], capture_output=True, text=True,
                             timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert packer.verify(out, against=source, progress=False)["ok"]
    assert json.dumps(packer.load_manifest(out)["class_counts"]) == "[350, 350]"


def test_a_huge_sparse_file_named_jpg_is_skipped_without_being_read(tmp_path):
    source = image_tree(tmp_path / "a", ["x"], 3)
    with open(source / "x" / "huge.jpg", "wb") as file:
        file.truncate(4 << 30)  # 4 GB of zeros that take no disk space

    def small_memory():
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "packer", "pack", str(source), "-o", str(out),
                           "-q"], capture_output=True, text=True, preexec_fn=small_memory)
    assert done.returncode == 0, done.stderr
    skipped = packer.load_manifest(out)["skipped"]
    assert skipped == [{"path": "x/huge.jpg", "reason": "not a JPEG: starts with 00 00 00 00 "
                        "00 00 00 00, expected FF D8 FF"}]


CUT_WHILE_CHECKSUMMED = """
import os, sys
import packer.sources.binary.dump as dump
checksum = dump.crc32
def cut_then_checksum(data, crc=0):
    os.truncate(sys.argv[2], 64 + 36 * 1000)  # the dump cut while its records are read
    return checksum(data, crc)
dump.crc32 = cut_then_checksum
from packer.cli import main
main()
"""


def test_a_dump_cut_while_it_is_packed_is_one_message(tmp_path):
    """The records' checksum read the dump through a memory map: cutting the file
    under it killed the process with SIGBUS."""
    dump = tmp_path / "imu.bin"
    records = 300_000  # 11 MB: several reads
    header = b"IMU1" + records.to_bytes(4, "little") + (200).to_bytes(4, "little")
    dump.write_bytes(header.ljust(64, b"\0") + bytes(36 * records))
    out = tmp_path / "imu.h5"
    done = subprocess.run([sys.executable, "-c", CUT_WHILE_CHECKSUMMED, "pack", str(dump),
                           "--spec", "imu", "--to", "hdf5", "-o", str(out), "-q"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, (done.returncode, done.stderr)
    assert f"{dump}: the file shrank while it was read" in done.stderr
    assert "Traceback" not in done.stderr and not out.exists()


SLOW_WORKERS = """
import os, pathlib, signal, sys, time
# Ctrl-C as a terminal's foreground process gets it: a test run in a background job of a
# script inherits SIGINT ignored, and Python keeps it so
signal.signal(signal.SIGINT, signal.default_int_handler)
import packer.packing.parallel as parallel
def slow(pair):
    pathlib.Path(os.environ["PACK_BUSY"]).touch()  # a worker is at work
    time.sleep(1)
    function, item = pair
    return function(item)
original = parallel.ordered_map
def ordered_map(function, items, workers):
    return original(slow, ((function, item) for item in items), workers)
parallel.ordered_map = ordered_map
from packer.cli import main
sys.argv = ["packer", *sys.argv[1:]]
main()
"""


def test_ctrl_c_with_workers_is_one_quiet_stop(tmp_path):
    """Ctrl-C reaches every process of the terminal's group: the workers stop without a
    word, the main process says what is kept, and --resume finishes the pack."""
    source = image_tree(tmp_path / "a", ["x", "y"], 300)
    out = tmp_path / "out"
    args = ["pack", str(source), "-o", str(out), "--workers", "2", "--max-count", "5", "-q"]
    busy = tmp_path / "busy"
    proc = subprocess.Popen([sys.executable, "-c", SLOW_WORKERS, *args], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, env={**os.environ, "PACK_BUSY": str(busy)})
    for _ in range(1200):  # until a worker is at work (waiting for a part's file raced
        if busy.exists() or proc.poll() is not None:  # the end of a fast pack under load)
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert not out.exists()
    run("pack", source, "-o", out, "--max-count", "5", "--resume", "-q")
    assert packer.load_manifest(out)["count"] == 600
