"""The training benchmark: how much of each step waits for data, loose against packed.

Usage:
    python tools/bench_train.py [--data DIR] [--packed DIR] [--epochs 2] [--image-size 64]
                                [--workers 2] [--batch-size 64] [--device auto|cpu|cuda]
                                [--amp auto|bf16|fp16|off] [--packed-only]

Trains the same model (the small CNN) on the same images twice with `train fit`
(with --lr 3e-4 and --cache off, so that every epoch reads through the loader):
once from the loose folder (one file opened and decoded per sample) and once from
its WebDataset shards (packed first if --packed is missing), and prints images/s
and the share of step time spent waiting for data for each, from OUT/summary.json.
--packed-only skips the loose run.

On a GPU, the small CNN at batch 256 in bf16, packed shards only:
    python tools/bench_train.py --device cuda --amp bf16 --batch-size 256 --packed-only
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from train.config import AMP_MODES, DEVICES


def fit(data: str, out: Path, args) -> dict:
    command = [sys.executable, "-m", "train", "fit", data, "--out", str(out), "--epochs",
               str(args.epochs), "--image-size", str(args.image_size), "--workers",
               str(args.workers), "--batch-size", str(args.batch_size), "--val-split", "0",
               "--device", args.device, "--amp", args.amp,
               "--lr", "3e-4", "--cache", "off"]  # the loader's speed, not a range test's
    print("$", " ".join(command), flush=True)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return json.loads((out / "summary.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="/tmp/bench-images")
    parser.add_argument("--packed")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", choices=DEVICES, default="auto")
    parser.add_argument("--amp", choices=AMP_MODES, default="auto")
    parser.add_argument("--packed-only", action="store_true", help="Skip the loose run.")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-train-"))
    packed = args.packed or str(work / "wds")
    if not args.packed:
        subprocess.run([sys.executable, "-m", "packer", "pack", args.data, "-o", packed, "-q"],
                       check=True)
    rows = {} if args.packed_only else {"loose files": fit(args.data, work / "loose", args)}
    rows["packed shards"] = fit(packed, work / "packed", args)
    print(f"\ndevice {args.device}, amp {args.amp}, batch {args.batch_size}")
    print(f"{'reader':<16} {'images/s':>10} {'waiting for data':>18}")
    for name, summary in rows.items():
        print(f"{name:<16} {summary['samples_per_s']:>10,.0f} "
              f"{100 * summary['data_wait_share']:>17.1f}%")


if __name__ == "__main__":
    main()
