"""A mix of two datasets read against each of them alone (packer.read.mix).

Usage:
    python tools/bench_mix.py [--n 6000] [--work DIR] [--workers 2] [--batch-size 64]
                              [--image-size 64] [--repeat 3] [--json FILE]

Makes two sets of --n JPEGs with ../shared/peerbench/make_data.py (64 to 160 px, seeds 0
and 1) unless --work holds them, packs the class folders of the first into tar shards
and of the second into an LMDB (as peerbench's run_project.sh does), then reads, warm,
shuffled epochs of --n samples through packer.DataLoader: each dataset alone, and the
two mixed 1:1 (`open_dataset([a, b], weights=[1, 1], samples=N)`), decoded to uint8
(3, S, S) and as bytes only (decode="raw"). samples/s, best of --repeat (the three
readers taking turns), and the mix's rate over the slower one's alone (target >= 0.9).
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import packer
from packer.formats.manifests import is_packed

ROOT = Path(__file__).resolve().parent.parent
MAKE_DATA = ROOT.parent / "shared" / "peerbench" / "make_data.py"


def prepare(work: Path, n: int) -> tuple[Path, Path]:
    """(tar shards of the first image set, an LMDB of the second), made if missing."""
    packs = (work / "a-wds", work / "b-lmdb")
    for seed, (out, to) in enumerate(zip(packs, ("webdataset", "lmdb"), strict=True)):
        images = work / f"images-{seed}"
        if not images.is_dir():
            subprocess.run([sys.executable, str(MAKE_DATA), "--n", str(n), "--seed", str(seed),
                            "--out", str(images), "--workers", "2"], check=True,
                           stdout=subprocess.DEVNULL)
        classes = work / f"classes-{seed}"  # the class folders without labels.csv
        if not classes.is_dir():
            classes.mkdir()
            for folder in sorted(images.glob("class_*")):
                (classes / folder.name).symlink_to(folder.resolve())
        if not is_packed(out):
            subprocess.run([str(Path(sys.executable).parent / "packer"), "pack", str(classes),
                            "--to", to, "-o", str(out), "-q", "--overwrite"], check=True,
                           stdout=subprocess.DEVNULL)
    return packs


def reader(paths, mixed: bool, n: int, args, decode: str):
    """(dataset, packer.DataLoader) of one dataset, or of the two mixed 1:1."""
    options = {"shuffle": True, "seed": 0, "decode": decode,
               "image_size": args.image_size if decode == "rgb8" else None}
    if mixed:
        ds = packer.open_dataset(list(paths), weights=[1, 1], samples=n, **options)
    else:
        ds = packer.open_dataset(paths, **options)
    return ds, packer.DataLoader(ds, batch_size=args.batch_size, num_workers=args.workers)


def epoch_rate(ds, loader, epoch: int) -> float:
    """samples/s of one shuffled epoch."""
    ds.set_epoch(epoch)
    start, count = time.perf_counter(), 0
    for batch in loader:
        count += len(batch["__key__"])
    assert count == len(ds), (count, len(ds))
    return count / (time.perf_counter() - start)


def best_rates(readers: dict, repeat: int) -> dict[str, float]:
    """Each reader's best samples/s over `repeat` epochs, the readers taking turns (the
    machine's speed drifts: no reader gets all the quiet minutes), after one epoch each
    that warms the page cache."""
    best = dict.fromkeys(readers, 0.0)
    for epoch in range(repeat + 1):
        for name, (ds, loader) in readers.items():
            rate = epoch_rate(ds, loader, epoch)
            best[name] = max(best[name], rate) if epoch else 0.0
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=6000)
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-mix"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    a, b = prepare(args.work, args.n)
    results = {}
    for decode in ("rgb8", "raw"):
        rates = best_rates({"a (webdataset) alone": reader(a, False, args.n, args, decode),
                            "b (lmdb) alone": reader(b, False, args.n, args, decode),
                            "a + b mixed 1:1": reader((a, b), True, args.n, args, decode)},
                           args.repeat)
        ratio = rates["a + b mixed 1:1"] / min(rates["a (webdataset) alone"],
                                               rates["b (lmdb) alone"])
        results[decode] = {**rates, "mixed / slower alone": ratio}
        for name, rate in rates.items():
            print(f"{decode:5} {name:22} {rate:9,.0f} samples/s", flush=True)
        print(f"{decode:5} mixed / slower alone   {ratio:9.2f}"
              f"  {'PASS' if ratio >= 0.9 else 'FAIL'} (>= 0.9)", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"n": args.n, "workers": args.workers,
                                         "batch_size": args.batch_size, **results}, indent=1))


if __name__ == "__main__":
    main()
