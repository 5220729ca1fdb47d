"""Speed and memory of packing a numeric CSV into HDF5, against the practical limit.

    python tools/bench_tables.py --rows 1000000 --work /tmp/bench-tables --repeat 3

Makes a CSV of `--rows` rows: 19 float feature columns and an integer label `y`
(20 columns). The limit is one `pandas.read_csv` of the whole file and one h5py
write of the whole float32 feature array and the labels; the run is
`packer pack big.csv --to hdf5 --label-column y`. Each runs in its own process
(imports included, as a user sees it); the figures are the best wall time of
`--repeat` runs and that process's peak RSS (ru_maxrss).
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

LIMIT = """
import sys, h5py, numpy as np, pandas as pd
frame = pd.read_csv(sys.argv[1])
features = frame.drop(columns="y").to_numpy(np.float32)
with h5py.File(sys.argv[2], "w") as f:
    f.create_dataset("features", data=features)
    f.create_dataset("labels", data=frame["y"].to_numpy())
"""


def make_csv(path: Path, rows: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    names = [f"f{i:02d}" for i in range(19)] + ["y"]
    with open(path, "w") as out:
        out.write(",".join(names) + "\n")
        for first in range(0, rows, 100_000):
            n = min(100_000, rows - first)
            features = rng.normal(size=(n, 19)).round(6)
            labels = rng.integers(0, 10, n)
            lines = "\n".join(",".join(f"{v:.6g}" for v in row) + f",{y}"
                              for row, y in zip(features.tolist(), labels.tolist(), strict=True))
            out.write(lines + "\n")


def measure(command: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one process."""
    began = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - began
    if status:
        raise SystemExit(f"{command}: exit status {status}")
    return seconds, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-tables"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    csv = args.work / f"big-{args.rows}.csv"
    if not csv.exists():
        make_csv(csv, args.rows)
    runs = {
        "limit: pandas.read_csv + one h5py write": [
            sys.executable, "-c", LIMIT, str(csv), str(args.work / "limit.h5")],
        "packer pack --to hdf5": [
            sys.executable, "-m", "packer", "pack", str(csv), "--to", "hdf5", "--label-column",
            "y", "-o", str(args.work / "big.h5"), "--overwrite", "-q"],
    }
    results = {}
    for name, command in runs.items():
        best = min((measure(command) for _ in range(args.repeat)), key=lambda r: r[0])
        results[name] = {"seconds": best[0], "peak_rss_mb": best[1],
                         "rows_per_s": args.rows / best[0]}
    limit, ours = results.values()
    print(f"{args.rows:,} rows x 20 columns, {csv.stat().st_size / 1e6:,.1f} MB CSV")
    for name, r in results.items():
        print(f"  {name:<42} {r['seconds']:6.2f} s  {r['rows_per_s']:>11,.0f} rows/s  "
              f"peak RSS {r['peak_rss_mb']:6.0f} MB")
    print(f"  speed: {limit['seconds'] / ours['seconds']:.2f} of the limit (target >= 0.5); "
          f"peak RSS: {ours['peak_rss_mb'] / limit['peak_rss_mb']:.2f} of the limit's "
          "(target <= 0.33)")
    if args.json:
        args.json.write_text(json.dumps({"rows": args.rows, "results": results}, indent=1))


if __name__ == "__main__":
    main()
