#!/usr/bin/env python
"""How far the reduced-scale JPEG decode differs from the full one, and what it saves; and
decoding in threads of the training process against DataLoader worker processes.

    python tools/bench_decode.py --images /tmp/bench-images --size 64
    python tools/bench_decode.py --images /tmp/bench-images --dataset images-wds --dataset raw.lmdb

--images: a folder of JPEGs (searched recursively); --dataset: packed datasets to read one
epoch of (batch 64) with num_workers=2 and with num_workers=0, threads=0 / 2.
"""

import argparse
import gc
import time
from pathlib import Path

import numpy as np


def decode_difference(images: Path, size: int, limit: int) -> dict:
    """Over up to `limit` JPEGs: the images decoded at a reduced scale, the largest,
    99.9th-percentile and mean pixel difference of theirs between the reduced-scale and
    the full decode (both resized to size x size), and each decode's rate on one core
    (CPU time)."""
    from PIL import Image

    from packer.read.pixels import rgb8_tensor

    paths = sorted(images.rglob("*.jpg"))[:limit]
    datas = [path.read_bytes() for path in paths]
    rates, results = {}, {}
    for reduced in (False, True):
        start = time.process_time()
        results[reduced] = [rgb8_tensor(d, (size, size), "jpg", reduced=reduced).int()
                            for d in datas]
        rates[reduced] = len(datas) / (time.process_time() - start)
    # the images decoded at a reduced scale (the others are the same pixels)
    diffs = [(a - b).abs() for a, b, path in zip(results[False], results[True], paths,
                                                 strict=True)
             if min(Image.open(path).size) >= 2 * size]
    shrunk, diffs = len(diffs), diffs or [np.zeros(1, np.int64)]
    return {"images": len(datas), "max_difference": max(int(d.max()) for d in diffs),
            "mean_difference": float(np.mean([np.asarray(d).mean() for d in diffs])),
            "p99_difference": float(np.percentile(np.concatenate([np.asarray(d).ravel()
                                                                  for d in diffs]), 99.9)),
            "decoded_reduced": shrunk, "full_per_s": rates[False],
            "reduced_per_s": rates[True]}


def epoch_rate(path: str, size: int, workers: int, threads: int) -> float:
    import packer

    ds = packer.open_dataset(path, shuffle=True, image_size=size, threads=threads)
    loader = packer.DataLoader(ds, batch_size=64, num_workers=workers)
    gc.collect()  # each epoch pays for its own garbage, not for the runs before it
    start, seen = time.perf_counter(), 0
    for batch in loader:
        seen += len(batch["__key__"])
    return seen / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=Path)
    parser.add_argument("--dataset", action="append", default=[])
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--limit", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    if args.images:
        found = decode_difference(args.images, args.size, args.limit)
        print(f"{found['images']:,} JPEGs to {args.size}x{args.size}: "
              f"{found['decoded_reduced']:,} decoded at a reduced scale; their difference from "
              f"the full decode: max {found['max_difference']}, 99.9th percentile "
              f"{found['p99_difference']:.0f}, mean {found['mean_difference']:.3f} (of 255); "
              f"one core: full {found['full_per_s']:,.0f}/s, reduced "
              f"{found['reduced_per_s']:,.0f}/s")
    print("| dataset | num_workers=2 | num_workers=0 | num_workers=0, threads=2 |")
    print("| --- | ---: | ---: | ---: |")
    for path in args.dataset:
        rates = [max(epoch_rate(path, args.size, workers, threads)
                     for _ in range(args.repeat)) for workers, threads in ((2, 0), (0, 0), (0, 2))]
        print(f"| {path} | " + " | ".join(f"{rate:,.0f}" for rate in rates) + " |")


if __name__ == "__main__":
    main()
