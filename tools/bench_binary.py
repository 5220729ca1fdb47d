"""The binary packing benchmark: a 1 GB IMU dump to HDF5, beside two baselines.

Usage:
    python tools/bench_binary.py [--size-mb 1000] [--work DIR] [--repeat 3] [--json FILE]

Makes an IMU dump in the shipped `imu` spec's layout (64-byte header, 36-byte
little-endian records) of --size-mb megabytes, reads it once so that every run
starts from a warm page cache, then measures, best of --repeat:

    cp                 `cp DUMP COPY`: the floor for reading and writing the bytes
    packer             `packer pack DUMP --spec imu --to hdf5 -o OUT -q`, as a
                       subprocess, with the peak RSS of its process tree
    struct loop        a loop calling `struct.unpack_from` (a compiled Struct) once
                       per record of the dump read into memory, appending each value
                       to per-field lists, as a hand-written reader does
    iter_unpack loop   the same with `struct.iter_unpack`, the fastest struct form
                       (no Python call per record); both loops are timed on the
                       first 1/8 of the records and scaled to all of them

and prints MB/s for each with packer's ratios to both baselines. packer's modules are
byte-compiled first, as an install does, so that no run compiles them (a shell with
PYTHONDONTWRITEBYTECODE set would otherwise do so in every run).
"""

import argparse
import importlib.util
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil

HEADER, RECORD = 64, 36
RECORD_DTYPE = np.dtype({"names": ["timestamp_ns", "accel", "gyro", "status"],
                         "formats": ["<u8", ("<f4", 3), ("<f4", 3), "<u2"],
                         "offsets": [0, 8, 20, 32], "itemsize": RECORD})


def make_dump(path: Path, size_mb: int) -> int:
    records = size_mb * 10**6 // RECORD
    rng = np.random.default_rng(0)
    with open(path, "wb") as file:
        header = bytearray(HEADER)
        header[:12] = b"IMU1" + struct.pack("<II", records, 200)
        file.write(header)
        for start in range(0, records, 1_000_000):
            count = min(1_000_000, records - start)
            block = np.zeros(count, RECORD_DTYPE)
            block["timestamp_ns"] = np.arange(start, start + count) * 5_000_000
            block["accel"] = rng.standard_normal((count, 3))
            block["gyro"] = rng.standard_normal((count, 3))
            block["status"] = np.arange(start, start + count) % 4
            file.write(block.tobytes())
    return records


def warm(path: Path) -> None:
    with open(path, "rb", buffering=0) as file:
        while file.read(1 << 24):
            pass


def compile_packer() -> None:
    """Byte-compiles packer's modules, as an install does: no timed run compiles them."""
    where = importlib.util.find_spec("packer").submodule_search_locations[0]
    subprocess.run([sys.executable, "-m", "compileall", "-q", where], check=True)


def timed_run(command: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of the command's process tree. Dirty pages of
    the previous run are written out first, so no run pays for another's writes."""
    os.sync()
    began = time.perf_counter()
    process = subprocess.Popen(command)
    peak, watched = 0, psutil.Process(process.pid)

    def sample():
        nonlocal peak
        while process.poll() is None:
            try:
                tree = [watched, *watched.children(recursive=True)]
                peak = max(peak, sum(p.memory_info().rss for p in tree))
            except psutil.NoSuchProcess:
                pass
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    if process.wait() != 0:
        raise SystemExit(f"failed: {' '.join(command)}")
    sampler.join()
    return time.perf_counter() - began, peak / 1e6


def struct_loop_seconds(path: Path, records: int) -> dict[str, float]:
    """Seconds of each struct loop over every record, from a timed 1/8."""
    part = max(1, records // 8)
    with open(path, "rb") as file:
        file.seek(HEADER)
        data = file.read(part * RECORD)
    record = struct.Struct("<Q3f3fH2x")

    def unpack_loop():
        columns = [[] for _ in range(8)]
        for offset in range(0, part * RECORD, RECORD):
            for column, value in zip(columns, record.unpack_from(data, offset), strict=True):
                column.append(value)

    def iter_unpack_loop():
        columns = [[] for _ in range(8)]
        for values in record.iter_unpack(data):
            for column, value in zip(columns, values, strict=True):
                column.append(value)

    seconds = {}
    for name, loop in (("struct_loop_s", unpack_loop), ("iter_unpack_loop_s", iter_unpack_loop)):
        began = time.perf_counter()
        loop()
        seconds[name] = (time.perf_counter() - began) * records / part
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=1000)
    parser.add_argument("--work", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-binary-"))
    work.mkdir(parents=True, exist_ok=True)
    dump = work / "imu.bin"
    records = make_dump(dump, args.size_mb)
    size = dump.stat().st_size
    warm(dump)
    compile_packer()
    packer = [sys.executable, "-m", "packer", "pack", str(dump), "--spec", "imu", "--to",
              "hdf5", "-o", str(work / "imu.h5"), "-q", "--overwrite"]
    cp = ["cp", str(dump), str(work / "copy.bin")]
    # Each run replaces the previous output; removing it first keeps that out of the timing.
    outputs = [work / "copy.bin", work / "imu.h5"]
    runs = {"cp": [], "packer": []}
    for _ in range(args.repeat):
        for output in outputs:
            shutil.rmtree(output) if output.is_dir() else output.unlink(missing_ok=True)
        runs["cp"].append(timed_run(cp))
        runs["packer"].append(timed_run(packer))
    loops = struct_loop_seconds(dump, records)
    best = {name: min(seconds for seconds, _ in measured) for name, measured in runs.items()}
    peak = max(rss for _, rss in runs["packer"])
    report = {"bytes": size, "records": records, "cp_s": best["cp"], "packer_s": best["packer"],
              **loops, "packer_peak_rss_mb": peak,
              "packer_vs_cp": best["cp"] / best["packer"],
              "packer_vs_struct_loop": loops["struct_loop_s"] / best["packer"],
              "packer_vs_iter_unpack_loop": loops["iter_unpack_loop_s"] / best["packer"],
              "commands": {"cp": " ".join(cp), "packer": " ".join(packer)}}
    print(f"{size / 1e6:,.0f} MB dump, {records:,} records of {RECORD} bytes; best of "
          f"{args.repeat}, warm page cache")
    for name, seconds in (("cp", best["cp"]), ("packer to hdf5", best["packer"]),
                          ("struct loop (scaled from 1/8)", loops["struct_loop_s"]),
                          ("iter_unpack loop (scaled)", loops["iter_unpack_loop_s"])):
        print(f"  {name:<30} {seconds:8.2f} s  {size / 1e6 / seconds:8.1f} MB/s")
    print(f"packer: {report['packer_vs_cp']:.2f}x the speed of cp (target >= 0.5), "
          f"{report['packer_vs_struct_loop']:.0f}x the struct loop (target >= 50; "
          f"{report['packer_vs_iter_unpack_loop']:.0f}x the iter_unpack loop), "
          f"peak RSS {peak:.0f} MB (target < 300)")
    print(f"commands:\n  {report['commands']['cp']}\n  {report['commands']['packer']}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    if not args.work:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
