"""The most any reader can give a training process the bytes of tar shards at, beside
`cat`: a ceiling row for reading bytes only (`decode="raw"`).

Usage:
    python tools/ceiling_read.py SHARDS_FOLDER [--workers 0,2] [--repeat 3] [--warm]

Each run drops the shards from the page cache first (posix_fadvise DONTNEED; --warm
reads them once instead). With N workers, torch's DataLoader starts N worker processes;
each reads its shards in pieces of about 2 MB that end on a member's end, straight into
shared-memory buffers (packer.read.ring), and sends where each image member starts
and ends; the training process makes each one `bytes`, as a batch holds them. With 0
workers the training process reads and slices the pieces itself. There is no index to
load (the shards' headers are read before timing), no shuffle, no class ids, no keys
and no checks: packer does all of these, so this is a speed it can approach but not
pass. `cat` runs on the same files after the same drop. A benchmark that starts a
process per run (../shared/peerbench) sees each process's first run, which also starts
torch's worker machinery for the first time.
"""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from packer.bench.probes import drop_cache
from packer.formats.webdataset.tarindex import index_shard
from packer.read.ring import LANDING, worker_slots

PIECE = 2 << 20


def pieces(shard: str) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """(offset, starts, ends) of each piece of `shard`, its image members relative to it."""
    index = index_shard(shard)
    images = np.flatnonzero(np.isin(np.array(index.field), ["jpg", "jpeg", "png", "webp"]))
    offsets, sizes = index.offset[images], index.size[images]
    out, first = [], 0
    while first < len(images):
        last = int(np.searchsorted(offsets + sizes, offsets[first] + PIECE, "right"))
        last = max(last, first + 1)
        low = int(offsets[first])
        out.append((low, offsets[first:last] - low, offsets[first:last] + sizes[first:last] - low))
        first = last
    return out


class Pieces(IterableDataset):
    """The pieces of every shard; each worker reads every N-th one."""

    def __init__(self, shards: list[str]):
        self.shards = shards
        self.plan = [(shard, *piece) for shard in shards for piece in pieces(shard)]

    def __iter__(self):
        info = get_worker_info()
        mine = self.plan[info.id::info.num_workers] if info else self.plan
        slots = worker_slots() if info else None
        files = {shard: os.open(shard, os.O_RDONLY) for shard in self.shards}
        try:
            for shard, low, starts, ends in mine:
                if slots is None:
                    data = os.pread(files[shard], int(ends[-1]), low)
                    yield list(map(data.__getitem__, map(slice, starts.tolist(), ends.tolist())))
                    continue
                into = slots.tensor((int(ends[-1]),))
                os.preadv(files[shard], [memoryview(into.numpy())], low)
                yield slots.ref(into), starts, ends
        finally:
            for fd in files.values():
                os.close(fd)


def as_it_is(item):
    return item


def landed(item) -> list[bytes]:
    if isinstance(item, list):
        return item
    ref, starts, ends = item
    LANDING.release()
    view = memoryview(LANDING.tensor(ref).numpy())
    return list(map(bytes, map(view.__getitem__, map(slice, starts.tolist(), ends.tolist()))))


def one_run(dataset: Pieces, shards: list[str], workers: int, warm: bool) -> tuple[int, float]:
    prepare(shards, warm)
    start, count = time.perf_counter(), 0
    for item in DataLoader(dataset, batch_size=None, num_workers=workers, collate_fn=as_it_is):
        count += len(landed(item))
    return count, time.perf_counter() - start


def prepare(shards: list[str], warm: bool) -> None:
    drop_cache(shards)
    if warm:
        cat(shards)


def cat(shards: list[str]) -> float:
    start = time.perf_counter()
    with open(os.devnull, "wb") as null:
        subprocess.run(["cat", *shards], stdout=null, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shards", type=Path, help="a folder of .tar shards (packer's or others')")
    parser.add_argument("--workers", default="0,2", help="worker counts, comma-separated")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; the best is shown")
    parser.add_argument("--warm", action="store_true", help="read with the files in the page cache")
    args = parser.parse_args()
    shards = sorted(str(path) for path in args.shards.glob("*.tar"))
    if not shards:
        sys.exit(f"{args.shards}: no .tar shards in it")
    torch.set_num_threads(1)
    dataset = Pieces(shards)
    count = sum(len(starts) for _, _, starts, _ in dataset.plan)
    state = "warm" if args.warm else "cold"
    cat_best = min((prepare(shards, args.warm), cat(shards))[1] for _ in range(args.repeat))
    print(f"{len(shards)} shards, {count:,} images; page cache {state}; best of {args.repeat}")
    print(f"  cat of the shards: {cat_best * 1e3:.0f} ms, {count / cat_best:,.0f} images/s")
    for workers in map(int, args.workers.split(",")):
        runs = [one_run(dataset, shards, workers, args.warm) for _ in range(args.repeat)]
        if any(seen != count for seen, _ in runs):
            sys.exit(f"read {[seen for seen, _ in runs]} images, not {count} each time")
        first, best = runs[0][1], min(took for _, took in runs)
        print(f"  ceiling, {workers} workers: best {best * 1e3:.0f} ms, {count / best:,.0f} "
              f"images/s, {cat_best / best:.2f} of cat; the process's first run {first * 1e3:.0f} "
              f"ms, {cat_best / first:.2f} of cat")


if __name__ == "__main__":
    main()
