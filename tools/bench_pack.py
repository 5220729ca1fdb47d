"""The packing benchmark: packer against `tar cf` on many small JPEGs.

Usage:
    python tools/bench_pack.py [--data DIR] [--count 20000] [--workers 1,2]
                               [--repeat 3] [--scale 10|0] [--json FILE]

Without --data, the standard dataset (tools/make_images.py, --count images) is
made in a temporary folder first. Every row runs as a subprocess, --repeat times,
on a warm page cache (every input file is read once before the runs):

    tar cf                      the floor: `tar --hard-dereference -cf OUT.tar -C DIR .`
    python read+write           the floor for any Python packer: a sorted walk that
                                reads every file and appends its bytes to one file
                                (no headers, no checks, no checksum)
    python checked tar          tools/floor_tar.py: the least work of a checked,
                                deterministic tar (walk, read, JPEG markers, ustar
                                headers, sha256) in 2 processes, without packer's
                                manifest, keys, labels, skip report and progress
    webdataset, check header    `packer pack DIR --to webdataset ...` per --workers
    webdataset, check decode    the same with `--check decode` per --workers
    decode ceiling              not a row: every JPEG decoded from memory in 1 and in 2
                                processes, the most --workers 2 can gain here with
                                --check decode; printed beside its speed-up
    lmdb / hdf5, check header   workers 1
    x SCALE wide / deep         tar cf and webdataset (workers 1) on SCALE
                                hard-linked copies of DIR, to see whether packer's
                                memory stays flat as the input grows: wide puts
                                the copies in the same folders (SCALE times the
                                files per folder), deep in a subfolder per copy
                                (as many files per folder, SCALE times the folders)

packer's modules are byte-compiled first, as an install does (under
PYTHONDONTWRITEBYTECODE every run would compile them again).

Reported per row: files/s and MB/s of input (best and median of the repeats),
the speed relative to `tar cf` on the same folder, and the peak RSS of the whole
process tree (the process and all its children, summed, sampled every 20 ms; the
highest of the repeats; MB = 10**6 bytes). Shared copy-on-write pages of forked
workers count once per process, so multi-process RSS errs high. Outputs go to a
temporary folder that is removed at the end.
"""

import argparse
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_binary import compile_packer  # noqa: E402
from make_images import make_images  # noqa: E402

POLL_SECONDS = 0.02
PYTHON_FLOOR = """
import os, sys
def walk(folder):
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        if entry.is_dir():
            yield from walk(entry.path)
        else:
            yield entry.path
with open(sys.argv[2], "wb") as out:
    for path in walk(sys.argv[1]):
        with open(path, "rb") as file:
            out.write(file.read())
"""


def _decode_run(datas: list[bytes]) -> int:
    from packer.sources.files.checks import check_file

    return sum(check_file("jpg", data, "decode") is None for data in datas)


def decode_ceiling(data: Path, repeat: int) -> dict:
    """Seconds to decode every JPEG of `data`, already in memory, in 1 process and in
    2 (forked, runs of 64 files): the most `--workers 2` can gain with --check decode
    on this machine, with no reading, writing or packing around the decoding."""
    from multiprocessing import get_context

    files = sorted(p for p in data.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg"))
    runs = [[p.read_bytes() for p in files[i:i + 64]] for i in range(0, len(files), 64)]
    seconds = {1: [], 2: []}
    with get_context("fork").Pool(2) as pool:
        for _ in range(repeat):
            began = time.perf_counter()
            list(map(_decode_run, runs))
            seconds[1].append(time.perf_counter() - began)
            began = time.perf_counter()
            pool.map(_decode_run, runs, chunksize=1)
            seconds[2].append(time.perf_counter() - began)
    best = {n: min(s) for n, s in seconds.items()}
    return {"files": len(files), "seconds_1": best[1], "seconds_2": best[2],
            "speedup": best[1] / best[2]}


def machine() -> dict:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        model = platform.processor() or model
    return {"cpu": model, "cores": os.cpu_count(), "memory_gb":
            round(psutil.virtual_memory().total / 2**30, 1), "python": platform.python_version()}


def packer_command() -> list[str]:
    beside = Path(sys.executable).parent / "packer"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("packer")
    return [found] if found else [sys.executable, "-m", "packer"]


def warm(folder: Path) -> tuple[int, int]:
    """Read every file once (warm page cache); returns (files, bytes)."""
    files = total = 0
    for dirpath, _, names in os.walk(folder):
        for name in names:
            with open(os.path.join(dirpath, name), "rb") as file:
                total += len(file.read())
            files += 1
    return files, total


def hardlink_copies(source: Path, target: Path, copies: int, deep: bool) -> None:
    """`copies` copies of a folder as hard links: in the same folders as rKK_NAME
    (wide: each folder holds `copies` times the files), or as rKK/NAME (deep: a
    subfolder per copy, so folders keep their size and only their number grows)."""
    for dirpath, _, names in os.walk(source):
        rel = Path(dirpath).relative_to(source)
        for k in range(copies):
            folder = target / rel / f"r{k:02d}" if deep else target / rel
            folder.mkdir(parents=True, exist_ok=True)
            for name in names:
                src, dst = Path(dirpath, name), folder / (name if deep else f"r{k:02d}_{name}")
                try:
                    os.link(src, dst)
                except OSError:  # another file system: copy instead
                    shutil.copyfile(src, dst)


def remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def run_once(command: list[str], output: Path) -> tuple[float, int]:
    """Run `command`; returns (wall seconds, peak RSS bytes of its process tree)."""
    remove(output)
    began = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    root, peak = psutil.Process(proc.pid), 0
    while proc.poll() is None:
        try:
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            tree = []
        rss = 0
        for p in tree:
            try:
                rss += p.memory_info().rss
            except psutil.NoSuchProcess:
                pass
        peak = max(peak, rss)
        time.sleep(POLL_SECONDS)
    wall = time.perf_counter() - began
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {shlex.join(command)}\n{err}")
    remove(output)
    return wall, peak


def measure(name: str, command: list[str], output: Path, files: int, size: int,
            repeat: int, floor: dict | None) -> dict:
    runs = [run_once(command, output) for _ in range(repeat)]
    walls = [w for w, _ in runs]
    best, median = min(walls), statistics.median(walls)
    row = {"name": name, "command": shlex.join(command), "files": files, "bytes": size,
           "seconds": walls, "files_per_s": files / best, "files_per_s_median": files / median,
           "mb_per_s": size / 1e6 / best, "mb_per_s_median": size / 1e6 / median,
           "peak_rss_mb": max(p for _, p in runs) / 1e6}
    row["vs_tar"] = row["files_per_s"] / floor["files_per_s"] if floor else 1.0
    print(f"  {name:<40} {row['files_per_s']:>9,.0f} {row['files_per_s_median']:>9,.0f} "
          f"{row['mb_per_s']:>7.1f} {row['mb_per_s_median']:>7.1f} {row['vs_tar']:>6.2f}x "
          f"{row['peak_rss_mb']:>8.1f}", flush=True)
    return row


def bench(data: Path, work: Path, args) -> dict:
    packer = packer_command()
    compile_packer()
    workers = [int(w) for w in args.workers.split(",")]
    where = subprocess.run([sys.executable, "-c", "import packer; print(packer.__version__, "
                            "packer.__file__)"], capture_output=True, text=True).stdout.split()
    print(f"packer: {shlex.join(packer)} (version {' from '.join(where) or 'unknown'})")
    files, size = warm(data)
    print(f"dataset: {data}: {files:,} files, {size / 1e6:.1f} MB, "
          f"average {size / max(files, 1) / 1e3:.2f} KB; repeat {args.repeat}\n")

    def pack(source: Path, to: str, out: Path, w: int, check: str | None = None) -> list:
        extra = ["--check", check] if check else []
        return [*packer, "pack", str(source), "--to", to, "-o", str(out), "-q", "--overwrite",
                "--workers", str(w), *extra]

    def tar(source: Path) -> list:  # hard links as data, as packer stores them
        return ["tar", "--hard-dereference", "-cf", str(work / "out.tar"), "-C", str(source), "."]

    floor_tar = str(Path(__file__).resolve().parent / "floor_tar.py")
    plan = [("tar cf", tar(data), work / "out.tar"),
            ("python read+write", [sys.executable, "-c", PYTHON_FLOOR, str(data),
                                   str(work / "floor.bin")], work / "floor.bin"),
            ("python checked tar, 2 processes", [sys.executable, floor_tar, str(data),
                                                 str(work / "floor.tar")], work / "floor.tar")]
    plan += [(f"webdataset header  workers {w}", pack(data, "webdataset", work / "wds", w),
              work / "wds") for w in workers]
    plan += [(f"webdataset decode  workers {w}",
              pack(data, "webdataset", work / "wds", w, "decode"), work / "wds")
             for w in workers]
    plan += [(f"{to:<10} header  workers 1", pack(data, to, work / to, 1), work / to)
             for to in ("lmdb", "hdf5")]

    print(f"  {'row':<40} {'files/s':>9} {'median':>9} {'MB/s':>7} {'median':>7} "
          f"{'vs tar':>7} {'RSS MB':>8}")
    rows, floor = [], None
    for name, command, output in plan:
        rows.append(measure(name, command, output, files, size, args.repeat, floor))
        floor = floor or rows[0]

    for layout in ("wide", "deep") if args.scale else ():
        scaled, began = work / f"data-x{args.scale}-{layout}", time.perf_counter()
        hardlink_copies(data, scaled, args.scale, layout == "deep")
        big_files, big_size = warm(scaled)
        print(f"  -- x{args.scale} {layout}: {big_files:,} files, {big_size / 1e6:.1f} MB "
              f"(hard links, made in {time.perf_counter() - began:.1f} s)")
        tag = f"x{args.scale} {layout}"
        rows.append(measure(f"tar cf  {tag}", tar(scaled), work / "out.tar",
                            big_files, big_size, args.repeat, None))
        rows.append(measure(f"webdataset header  workers 1  {tag}",
                            pack(scaled, "webdataset", work / "wds", 1), work / "wds",
                            big_files, big_size, args.repeat, rows[-1]))
        shutil.rmtree(scaled)
    ceiling = decode_ceiling(data, args.repeat)
    return {"dataset": {"path": str(data), "files": files, "bytes": size}, "rows": rows,
            "decode_ceiling": ceiling}


def summary(result: dict, args) -> None:
    rows = {r["name"]: r for r in result["rows"]}
    print("\nworkers speed-up (best files/s, relative to workers 1):")
    for check in ("header", "decode"):
        one = rows.get(f"webdataset {check}  workers 1")
        for name, row in rows.items():
            if one and name.startswith(f"webdataset {check}  workers ") and row is not one \
                    and "  x" not in name:
                target = ("  (target >= 1.70x; decoding alone, from memory: "
                          f"{result['decode_ceiling']['speedup']:.2f}x)"
                          if check == "decode" else "")
                print(f"  {name}: {row['files_per_s'] / one['files_per_s']:.2f}x{target}")
    small = rows.get("webdataset header  workers 1")
    for layout in ("wide", "deep"):
        big = rows.get(f"webdataset header  workers 1  x{args.scale} {layout}")
        if small and big:
            print(f"peak RSS, webdataset workers 1: {small['peak_rss_mb']:.1f} MB for "
                  f"{small['files']:,} files, {big['peak_rss_mb']:.1f} MB for {big['files']:,} "
                  f"files, {layout} ({big['peak_rss_mb'] / small['peak_rss_mb']:.2f}x)")
    print("\ncommands (one run each; OUT under a temporary folder, removed before each run):")
    for row in result["rows"]:
        print(f"  {row['command']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, help="ImageFolder to pack (default: make one)")
    parser.add_argument("--count", type=int, default=20_000,
                        help="images to make when --data is not given (default 20000)")
    parser.add_argument("--workers", default="1,2", help="packer --workers values (default 1,2)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per row (default 3)")
    parser.add_argument("--scale", type=int, default=10,
                        help="copies in the memory-flatness dataset (default 10; 0 skips "
                             "those rows)")
    parser.add_argument("--json", type=Path, help="also write the results here as JSON")
    args = parser.parse_args()
    if args.scale < 0 or args.scale == 1:
        parser.error("--scale: 0 (no scaled rows) or 2 and more copies")

    info = machine()
    print(f"machine: {info['cpu']}, {info['cores']} cores, {info['memory_gb']} GiB, "
          f"Python {info['python']}")
    work = Path(tempfile.mkdtemp(prefix="bench-pack-"))
    try:
        data = args.data
        if data is None:
            data = work / "images"
            made = make_images(data, args.count)
            print(f"made {made['count']:,} images in {made['seconds']:.1f} s")
        elif not data.is_dir():
            raise SystemExit(f"--data {data}: not a folder")
        result = bench(data, work, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary(result, args)
    if args.json:
        args.json.write_text(json.dumps({"machine": info, **result,
                                         "repeat": args.repeat}, indent=2))
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
