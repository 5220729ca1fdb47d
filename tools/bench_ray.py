"""Packing with `--engine local` against `--engine ray`, Ray's start-up shown apart.

Usage:
    python tools/bench_ray.py [--data DIR | --files 200000 [--tiny]] [--to webdataset]
                              [--address ADDRESS] [--workers 1] [--check header]
                              [--json FILE]

Without --data, a folder of --files inputs is made in a temporary folder first:
realistic JPEGs (tools/make_images.py), or with --tiny 100-byte `.bin` files in 10
class folders (quick to make; the per-file costs are what a pack of many small files
is made of). The folder is read once before the runs (a warm page cache), then packed
in this process, each run into a fresh output:

    local        packer.pack(..., engine="local", workers=--workers), twice (the
                 faster counts: the first also imports what packing needs)
    ray start    ray.init: a new local instance (or a connection to --address)
    ray pack     packer.pack(..., engine="ray") over that connection
    ray stop     ray.shutdown

and the two outputs are compared part by part (the manifests' sha256 or
samples_sha256). Printed: seconds and files/s of each, and the Ray pack with and
without its start and stop.
"""

import argparse
import json
import logging
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_images import make_images  # noqa: E402

import packer  # noqa: E402
from packer.packing.options import PackOptions  # noqa: E402


def make_tiny(root: Path, count: int) -> None:
    """`count` files of 100 bytes each, `.bin`, in 10 class folders."""
    for number in range(count):
        folder = root / f"class_{number % 10:02d}"
        if number < 10:
            folder.mkdir(parents=True)
        (folder / f"{number:07d}.bin").write_bytes(os.urandom(100))


def warm(root: Path) -> int:
    """Read every file once; returns how many there are."""
    count = 0
    for folder, _, names in os.walk(root):
        for name in names:
            with open(os.path.join(folder, name), "rb") as file:
                file.read()
            count += 1
    return count


def timed_pack(data: Path, out: Path, **options) -> tuple[float, dict]:
    began = time.perf_counter()
    manifest = packer.pack(data, out, PackOptions(progress=False, **options))
    return time.perf_counter() - began, manifest


def part_digests(manifest: dict) -> list:
    return [(p["count"], p.get("sha256") or p.get("samples_sha256")) for p in manifest["parts"]]


def bench(data: Path, work: Path, args) -> dict:
    import ray

    files = warm(data)
    runs = [timed_pack(data, work / f"local{n}", to=args.to, workers=args.workers,
                       check=args.check) for n in range(2)]  # the first also pays packer's imports
    local_s, local = min(runs, key=lambda run: run[0])
    began = time.perf_counter()
    ray.init(address=args.address or "local", logging_level=logging.ERROR, log_to_driver=False,
             **({} if args.address else {"include_dashboard": False}))
    start_s = time.perf_counter() - began
    cpus = int(ray.cluster_resources().get("CPU", 0))
    pack_s, on_ray = timed_pack(data, work / "ray", to=args.to, engine="ray", check=args.check)
    began = time.perf_counter()
    ray.shutdown()
    stop_s = time.perf_counter() - began
    return {"files": files, "samples": local["count"], "to": args.to, "check": args.check,
            "local_workers": args.workers, "ray_cpus": cpus,
            "address": args.address or "a local instance",
            "local_s": local_s, "ray_start_s": start_s, "ray_pack_s": pack_s,
            "ray_stop_s": stop_s, "identical": part_digests(local) == part_digests(on_ray),
            "machine": f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}, "
                       f"Python {platform.python_version()}"}


def report(row: dict) -> str:
    files, total = row["files"], row["ray_start_s"] + row["ray_pack_s"] + row["ray_stop_s"]
    lines = [f"{files:,} files ({row['samples']:,} samples) into {row['to']}, --check "
             f"{row['check']}; {row['machine']}",
             f"  local, --workers {row['local_workers']}:  {row['local_s']:8.2f} s  "
             f"{files / row['local_s']:>9,.0f} files/s",
             f"  ray start ({row['address']}, {row['ray_cpus']} CPUs): {row['ray_start_s']:8.2f} s",
             f"  ray pack:              {row['ray_pack_s']:8.2f} s  "
             f"{files / row['ray_pack_s']:>9,.0f} files/s",
             f"  ray stop:              {row['ray_stop_s']:8.2f} s",
             f"  ray, all of it:        {total:8.2f} s  {files / total:>9,.0f} files/s",
             f"  the same parts: {'yes' if row['identical'] else 'NO'}"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, help="a folder to pack (default: made here)")
    parser.add_argument("--files", type=int, default=200_000, help="files to make")
    parser.add_argument("--tiny", action="store_true", help="100-byte .bin files, not JPEGs")
    parser.add_argument("--to", default="webdataset", help="the format (default webdataset)")
    parser.add_argument("--address", help="a running Ray cluster (default: a local instance)")
    parser.add_argument("--workers", type=int, default=1, help="--workers of the local run")
    parser.add_argument("--check", default="header", help="header (default), decode or none")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as temp:
        work, data = Path(temp), args.data
        if data is None:
            data = work / "input"
            began = time.perf_counter()
            if args.tiny:
                make_tiny(data, args.files)
            else:
                make_images(data, args.files)
            print(f"made {args.files:,} files in {time.perf_counter() - began:.1f} s",
                  flush=True)
        row = bench(data, work, args)
    print(report(row))
    if args.json:
        args.json.write_text(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
