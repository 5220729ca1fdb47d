"""The loader benchmark: packer.open_dataset against loose files and the plain
`webdataset` library, one full epoch per reader.

Usage:
    python tools/bench_load.py [--data DIR] [--work DIR] [--batch-size 64]
                               [--workers 2] [--image-size 64] [--repeat 3]
                               [--shard-size 64MB] [--no-x10] [--json FILE]

--data is an ImageFolder (default /tmp/bench-images, made by tools/make_images.py).
It is packed into --work (default /tmp/bl) as wds/, lmdb/ and hdf5/ when missing.
Every reader runs one full shuffled epoch, --repeat times; samples/s of the best
and the median run. Epoch time includes starting the DataLoader's workers.

1. decode (warm page cache: every file read once first): uint8 (3, S, S) tensors,
   resized with BILINEAR. Loose files: a map-style Dataset (PIL open, RGB, resize,
   numpy to tensor) with shuffle=True; plain webdataset: WebDataset(shards,
   shardshuffle=len(shards)).shuffle(1000).decode("pil") plus the same resize in a
   map; packer: open_dataset(decode="rgb8", image_size=S, shuffle=True) per format.
   The decode limit is the single-core rate of the same work on the same images
   held in memory (no I/O, no draft mode), times --workers. For reference: that
   work in --workers processes at once (no DataLoader), and through the readers'
   DataLoader from memory (what a reader that costs nothing would get).
2. raw (bytes only), cold: before each run every file of the reader gets
   posix_fadvise(DONTNEED) (data pages only; dentries and inodes stay cached, and
   a host page cache under a VM is not touched: the cold/warm probe shows it).
   `cat` of the shards after the same drop is the I/O ceiling; a DataLoader over
   a dataset that reads nothing (the same dict every sample) is the ceiling of
   any reader that goes through a DataLoader with these workers and batch size. Loose files are
   batched as lists (collate_fn=list); packer with the default collate (lists of
   bytes and keys, a `cls` tensor), as a user gets it.
3. peak RSS of the process tree (main + workers, summed RSS, sampled every 20 ms,
   in a subprocess) for one packer webdataset decode epoch on the data and on a
   x10 copy (hard links, class_XX/rKK/, packed with --shard-size 256MB). Shared
   pages (torch's libraries) count once per process.

Targets (PASS/FAIL): each packer format in decode mode >= the webdataset library
and >= 0.9x the decode limit; raw cold packer wds >= 5x loose files and >= 0.5x
cat; peak RSS x10 <= 1.2x.
"""

import argparse
import io
import json
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

import numpy as np
import psutil
import torch
import webdataset as wds
from PIL import Image
from torch.utils.data import Dataset

import packer
from packer.bench.probes import drop_cache
from packer.formats import format_module
from packer.formats.manifests import is_packed
from packer.read.loose import loose_images

FORMATS = {"wds": "webdataset", "lmdb": "lmdb", "hdf5": "hdf5"}
_BLOBS: list[bytes] = []  # the images in memory, for the decode limit (inherited by fork)


def pack(data: Path, out: Path, to: str, shard_size: str) -> None:
    """Pack `data` into `out` unless it is there already; print the command either way."""
    shards = ["--shard-size", shard_size] if to == "webdataset" else []
    command = [str(Path(sys.executable).parent / "packer"), "pack", str(data), "--to", to,
               "-o", str(out), *shards, "-q", "--overwrite"]
    done = is_packed(out)
    print(f"  $ {' '.join(command)}{'   (done before)' if done else ''}", flush=True)
    if not done:
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def packed_files(dataset: Path) -> list[str]:
    """The files holding the samples, as the dataset's format names them."""
    manifest = packer.load_manifest(dataset)
    return [str(p) for p in format_module(manifest["format"]).data_files(dataset, manifest)]


def to_tensor(image: Image.Image, size: int) -> torch.Tensor:
    image = image.convert("RGB").resize((size, size), Image.BILINEAR)
    return torch.from_numpy(np.asarray(image).copy()).permute(2, 0, 1)


class LooseFiles(Dataset):
    """The baseline: one file per sample, opened by path (size None: the bytes). With
    `memory`, the images come from _BLOBS instead: a reader that costs nothing."""

    def __init__(self, items: list[tuple[str, int]], size: int | None, memory: bool = False):
        self.items, self.size, self.memory = items, size, memory

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int):
        path, label = self.items[index]
        if self.size is None:
            with open(path, "rb") as file:
                return file.read(), label
        with Image.open(io.BytesIO(_BLOBS[index]) if self.memory else path) as image:
            return to_tensor(image, self.size), label


class ReadsNothing(torch.utils.data.IterableDataset):
    """As many samples as the data, each the same small dict, split over the workers:
    the DataLoader's own ceiling, what any reader through it can at most reach."""

    def __init__(self, count: int):
        self.count = count

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        sample = {"__key__": "class_00/000000", "jpg": b"", "cls": 0}
        for _ in range(worker, self.count, workers):
            yield sample


def plain_webdataset(urls: list[str], size: int):
    """What a user of the webdataset library writes (webdataset 1.0.2)."""
    return (wds.WebDataset(urls, shardshuffle=len(urls), seed=0).shuffle(1000)
            .decode("pil").to_tuple("jpg", "cls")
            .map_tuple(lambda image: to_tensor(image, size), int))


def batch_len(batch) -> int:
    return len(batch["__key__"]) if isinstance(batch, dict) else len(batch[0])


def cpu_now() -> tuple[float, float, float]:
    """(wall clock, busy CPU seconds of the machine, CPU seconds of this process and its
    reaped children: DataLoader workers, pools, cat)."""
    machine, own = psutil.cpu_times(), os.times()
    busy = sum(getattr(machine, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq"))
    return time.perf_counter(), busy, own.user + own.system + own.children_user + \
        own.children_system


def other_load(began: tuple) -> float:
    """CPU cores that processes outside this benchmark used since `began`."""
    now = cpu_now()
    return max(0.0, (now[1] - began[1]) - (now[2] - began[2])) / (now[0] - began[0])


def epoch(make_loader) -> tuple[float, int, float]:
    began, count = cpu_now(), 0
    for batch in make_loader():
        count += batch_len(batch)
    return time.perf_counter() - began[0], count, other_load(began)


def resident(paths: list[str]) -> int | None:
    """Bytes of `paths` in the page cache (fincore), or None without fincore."""
    total = 0
    for i in range(0, len(paths), 2000):
        try:
            out = subprocess.run(["fincore", "-b", "-n", "-o", "RES", *paths[i:i + 2000]],
                                 capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            return None
        total += sum(int(v) for v in out.split())
    return total


def cold_check(paths: list[str]) -> dict:
    """Drop, then: bytes still resident, and the time to read a probe cold and warm."""
    probe = paths[:500] if len(paths) > 100 else paths[:1]  # loose files: 500, packed: 1
    size = sum(os.path.getsize(p) for p in probe)
    drop_cache(paths)
    left = resident(paths)
    times = []
    for _ in range(2):
        began = time.perf_counter()
        for path in probe:
            with open(path, "rb") as file:
                file.read()
        times.append(time.perf_counter() - began)
    drop_cache(probe)
    return {"resident_after_drop": left, "probe_files": len(probe), "probe_bytes": size,
            "cold_s": times[0], "warm_s": times[1], "cold_over_warm": times[0] / times[1]}


def measure(name: str, make_loader, repeat: int, files: list[str] | None = None) -> dict:
    """Best and median of `repeat` epochs; with `files`, the cache is dropped first."""
    seconds, checks, others, count = [], [], [], 0
    for _ in range(repeat):
        if files:
            checks.append(cold_check(files))
        wall, count, other = epoch(make_loader)
        seconds.append(wall)
        others.append(other)
    row = {"name": name, "samples": count, "seconds": seconds, "other_load": others,
           "best": count / min(seconds), "median": count / statistics.median(seconds)}
    if checks:
        row["cold"] = checks[-1]
        c, left = checks[-1], checks[-1]["resident_after_drop"]
        row["note"] = (f"resident after drop {'?' if left is None else f'{left / 1e6:.1f} MB'}"
                       f"; probe {c['probe_files']} file(s) {c['probe_bytes'] / 1e6:.1f} MB "
                       f"cold {c['cold_s'] * 1e3:.1f} ms / warm {c['warm_s'] * 1e3:.1f} ms")
    print(f"  {name:<34} {row['best']:>9,.0f} {row['median']:>9,.0f} {max(others):>6.2f}  "
          f"{row.get('note', '')}", flush=True)
    return row


def decode_share(size: int, worker: int = 0, workers: int = 1) -> list[dict]:
    """Decode every `workers`-th image held in memory, from `worker` on."""
    for blob in _BLOBS[worker::workers]:
        with Image.open(io.BytesIO(blob)) as image:
            to_tensor(image, size)
    return [{"__key__": _BLOBS[worker::workers]}]  # one pseudo-batch, for the count


def decode_parallel(size: int, workers: int) -> list[dict]:
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        return [b for part in pool.starmap(decode_share, [(size, k, workers) for k in
                                                          range(workers)]) for b in part]


def decode_limit(items: list[tuple[str, int]], size: int, repeat: int, cores: int,
                 batch_size: int) -> list[dict]:
    """The decode limit (one core's rate of the same work on the images held in memory,
    times `cores`) and, for reference, that work in `cores` processes at once, and
    through the readers' DataLoader (neither with I/O)."""
    _BLOBS[:] = [Path(path).read_bytes() for path, _ in items]
    one = measure("decode, 1 core, in memory", lambda: decode_share(size), repeat)
    limit = {"name": "decode limit", "best": one["best"] * cores,
             "median": one["median"] * cores}
    print(f"  {f'decode limit (1 core x {cores})':<34} {limit['best']:>9,.0f} "
          f"{limit['median']:>9,.0f}")
    rows = [one, limit, measure(f"decode, {cores} processes, in memory",
                                lambda: decode_parallel(size, cores), repeat)]
    rows.append(measure("in memory, same DataLoader", lambda: torch.utils.data.DataLoader(
        LooseFiles(items, size, memory=True), batch_size=batch_size, num_workers=cores,
        shuffle=True), repeat))
    _BLOBS.clear()
    return rows


def tree_peak_rss(command: list[str]) -> tuple[int, float]:
    """Run `command`; (peak summed RSS of its process tree, wall seconds)."""
    began = time.perf_counter()
    proc = subprocess.Popen(command)
    root, peak = psutil.Process(proc.pid), 0
    while proc.poll() is None:
        try:
            peak = max(peak, sum(p.memory_info().rss
                                 for p in (root, *root.children(recursive=True))))
        except psutil.NoSuchProcess:
            pass
        time.sleep(0.02)
    if proc.returncode:
        raise SystemExit(f"failed: {command}")
    return peak, time.perf_counter() - began


def hardlink_x10(data: Path, target: Path) -> None:
    for path, _ in loose_images(data):
        rel = Path(path).relative_to(data)
        for k in range(10):
            dst = target / rel.parts[0] / f"r{k:02d}" / Path(*rel.parts[1:])
            if not dst.exists():
                dst.parent.mkdir(parents=True, exist_ok=True)
                os.link(path, dst)


def packer_loader(path, args, decode: str, size):
    ds = packer.open_dataset(str(path), shuffle=True, seed=0, decode=decode, image_size=size)
    return packer.DataLoader(ds, batch_size=args.batch_size, num_workers=args.workers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("/tmp/bench-images"))
    parser.add_argument("--work", type=Path, default=Path("/tmp/bl"))
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--shard-size", default="64MB",
                        help="tar shard size when packing (64MB: 2 shards of the standard data)")
    parser.add_argument("--no-x10", action="store_true", help="skip the 200,000-sample RSS run")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--epoch-only", type=Path, help=argparse.SUPPRESS)  # RSS child
    args = parser.parse_args()
    if args.epoch_only:
        epoch(lambda: packer_loader(args.epoch_only, args, "rgb8", args.image_size))
        return

    torch.manual_seed(0)
    size, bs, nw = args.image_size, args.batch_size, args.workers
    items = loose_images(args.data)
    loose = [path for path, _ in items]
    print("packed data:")
    args.work.mkdir(parents=True, exist_ok=True)
    for name, to in FORMATS.items():
        pack(args.data, args.work / name, to, args.shard_size)
    shards = packed_files(args.work / "wds")
    files = {name: packed_files(args.work / name) for name in FORMATS}
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), platform.processor())
    conditions = {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
                  "torch": torch.__version__, "webdataset": version("webdataset"),
                  "samples": len(items), "bytes": sum(os.path.getsize(p) for p in loose),
                  "shards": len(shards), "batch_size": bs, "workers": nw, "image_size": size,
                  "repeat": args.repeat}
    print(f"conditions: {json.dumps(conditions)}")
    head = f"  {'reader':<34} {'best/s':>9} {'median/s':>9} {'other':>6}"
    print("other: CPU cores used by processes outside the benchmark during the runs (max "
          "over the repeats; 10 ms ticks, so coarse for runs under 1 s); above ~0.1 the figures "
          "are disturbed\n")

    print(f"1. decode mode, warm page cache (uint8 3x{size}x{size}, batch {bs}, {nw} workers)")
    print(head)
    for paths in (loose, *files.values()):
        for path in paths:
            Path(path).read_bytes()
    decode = [measure("loose files (ImageFolder-like)", lambda: torch.utils.data.DataLoader(
        LooseFiles(items, size), batch_size=bs, num_workers=nw, shuffle=True), args.repeat)]
    decode.append(measure("webdataset library", lambda: torch.utils.data.DataLoader(
        plain_webdataset(shards, size), batch_size=bs, num_workers=nw), args.repeat))
    for name in FORMATS:
        decode.append(measure(f"packer {name}", lambda n=name: packer_loader(
            args.work / n, args, "rgb8", size), args.repeat))
    decode += decode_limit(items, size, args.repeat, nw, bs)

    print(f"\n2. raw mode (bytes), page cache dropped before every run (batch {bs}, {nw} workers)")
    print(head)
    raw = [measure("loose files", lambda: torch.utils.data.DataLoader(
        LooseFiles(items, None), batch_size=bs, num_workers=nw, shuffle=True,
        collate_fn=list), args.repeat, loose)]
    for name in FORMATS:
        raw.append(measure(f"packer {name}", lambda n=name: packer_loader(
            args.work / n, args, "raw", None), args.repeat, files[name]))

    def cat_loader():  # `cat shards > /dev/null`, counted in samples
        with open(os.devnull, "wb") as null:
            subprocess.run(["cat", *shards], stdout=null, check=True)
        return [{"__key__": [None] * len(items)}]
    raw.append(measure("DataLoader, reads nothing", lambda: torch.utils.data.DataLoader(
        ReadsNothing(len(items)), batch_size=bs, num_workers=nw), args.repeat))
    raw.append(measure("cat of the shards (I/O ceiling)", cat_loader, args.repeat, shards))

    print("\n3. peak RSS of the process tree, packer wds, decode mode, one epoch")
    me = [sys.executable, __file__, "--batch-size", str(bs), "--workers", str(nw),
          "--image-size", str(size), "--epoch-only"]
    rss = {"small": tree_peak_rss([*me, str(args.work / "wds")])}
    print(f"  {len(items):,} samples: {rss['small'][0] / 1e6:.0f} MB ({rss['small'][1]:.1f} s)")
    if not args.no_x10:
        x10 = Path(f"{args.data}-x10")
        hardlink_x10(args.data, x10)
        pack(x10, args.work / "wds-x10", "webdataset", "256MB")
        rss["x10"] = tree_peak_rss([*me, str(args.work / "wds-x10")])
        print(f"  {10 * len(items):,} samples: {rss['x10'][0] / 1e6:.0f} MB "
              f"({rss['x10'][1]:.1f} s)")

    wds_speed, limit = decode[1]["best"], decode[6]["best"]
    print("\ntargets")
    verdicts = []

    def target(text: str, value: float, goal: float, higher: bool = True) -> None:
        ok = value >= goal if higher else value <= goal
        verdicts.append({"target": text, "value": value, "goal": goal, "pass": ok})
        print(f"  {'PASS' if ok else 'FAIL'}  {text}: {value:.2f} (goal {'>=' if higher else '<='}"
              f" {goal:.2f})")
    for row in decode[2:5]:
        target(f"decode {row['name']} / webdataset library", row["best"] / wds_speed, 1.0)
        target(f"decode {row['name']} / decode limit", row["best"] / limit, 0.9)
    tar_raw = raw[1]["best"]
    target("raw cold packer wds / loose files", tar_raw / raw[0]["best"], 5.0)
    target("raw cold packer wds / cat of the shards", tar_raw / raw[-1]["best"], 0.5)
    if "x10" in rss:
        target("peak RSS x10 / x1", rss["x10"][0] / rss["small"][0], 1.2, higher=False)
    if args.json:
        args.json.write_text(json.dumps({"conditions": conditions, "decode": decode, "raw": raw,
                                         "rss": rss, "targets": verdicts}, indent=2))
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
