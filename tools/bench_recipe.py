"""Does `train fit` with no options beat a linear model on small real data?

Usage:
    python tools/bench_recipe.py [--seeds 0,1,2] [--only digits,wine] [--work DIR] [--json]

Packs scikit-learn's bundled datasets as a user would, split when packed
(`--split train=0.8,val=0.2`: stratified by class): digits as 32x32 grey PNGs in class
folders, also with one class cut to a tenth of its images (imbalanced) and as 50
images (5 a class); breast-cancer and wine as CSV into HDF5; diabetes as a regression
CSV into HDF5. It runs `train fit DATA --seed S` on the CPU for each seed (no other
option: every other choice is the trainer's, the validation split the packed one), and
prints each validation score beside a logistic regression (ridge for regression; for
the imbalanced set, class-balanced, scored by macro-F1) on standardised features,
fitted on exactly the same split, read back from the packed data. The targets:

    digits                  accuracy at least 0.98
    digits-imbalanced       macro-F1 at least the balanced logistic regression's
    digits-50               under 2 minutes
    breast-cancer, wine     accuracy at least the logistic regression's minus 0.01
    diabetes                MAE no worse than ridge regression's
    every run               under 3 minutes
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from sklearn_data import TABLES, linear_baseline, write_digits, write_table  # noqa: E402

SPLIT = "train=0.8,val=0.2"
SECONDS = 180
DATASETS = ("digits", "digits-imbalanced", "digits-50", "breast-cancer", "wine", "diabetes")
RARE_DIGIT, RARE_SHARE = 3, 0.1  # digits-imbalanced keeps a tenth of the threes


def run(*command) -> None:
    subprocess.run([sys.executable, "-m", *map(str, command)], check=True,
                   stdout=subprocess.DEVNULL, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})


def digit_folder(name: str, work: Path) -> Path:
    """The digits as PNGs in class folders: all of them, or a subset linked to them."""
    every = work / "digits"
    if not every.exists():
        write_digits(every)
    if name == "digits":
        return every
    subset = work / name
    if not subset.exists():
        for folder in sorted(every.iterdir()):
            files = sorted(folder.iterdir())
            keep = (5 if name == "digits-50" else
                    round(len(files) * RARE_SHARE) if folder.name == str(RARE_DIGIT) else None)
            (subset / folder.name).mkdir(parents=True)
            for file in files[:keep]:
                (subset / folder.name / file.name).symlink_to(file)
    return subset


def pack(name: str, work: Path) -> tuple[Path, str]:
    """The packed dataset (made once per work folder) and its task."""
    if name.startswith("digits"):
        packed, task = work / f"{name}-wds", "classify"
        if not packed.exists():
            run("packer", "pack", digit_folder(name, work), "-o", packed, "--split", SPLIT, "-q")
        return packed, task
    _, label, task = TABLES[name]
    packed = work / f"{name}.h5"
    if not packed.exists():
        csv = write_table(name, work / f"{name}.csv")
        run("packer", "pack", csv, "--to", "hdf5", "--label-column", label, "--task", task,
            "-o", packed, "--split", SPLIT, "-q")
    return packed, task


def split_arrays(packed: Path, side: str) -> tuple[np.ndarray, np.ndarray]:
    """Features and labels of one split, as train fit reads it."""
    import packer

    data = packer.open_dataset(str(packed), decode="rgb8", split=side)
    features, labels = [], []
    for batch in packer.DataLoader(data, batch_size=512):
        image = batch.get("png")
        values = image[:, 0] if image is not None else batch["npy"]  # grey: one channel
        features.append(values.reshape(len(values), -1).float().numpy())
        labels.append(np.asarray(batch["cls"] if "cls" in batch else batch["target.npy"]))
    return np.concatenate(features), np.concatenate(labels)


def baseline(packed: Path, task: str, balanced: bool) -> float:
    train_x, train_y = split_arrays(packed, "train")
    val_x, val_y = split_arrays(packed, "val")
    features, targets = np.concatenate([train_x, val_x]), np.concatenate([train_y, val_y])
    rows = np.arange(len(targets))
    return linear_baseline(features, targets, task, rows[:len(train_y)], rows[len(train_y):],
                           balanced)


def fit(packed: Path, out: Path, seed: int) -> tuple[dict, float]:
    began = time.perf_counter()
    run("train", "fit", packed, "--seed", seed, "--out", out)
    return json.loads((out / "summary.json").read_text()), time.perf_counter() - began


def macro_f1(val: dict) -> float:
    held = [s["f1"] for s in val["per_class"].values() if s["f1"] is not None]
    return sum(held) / len(held)


def row(name: str, task: str, summary: dict, seconds: float, linear: float, seed: int) -> dict:
    val = summary["best"]["val"]
    metric = ("macro-F1" if name == "digits-imbalanced" else
              "accuracy" if task == "classify" else "MAE")
    score = {"macro-F1": macro_f1, "accuracy": lambda v: v["accuracy"],
             "MAE": lambda v: v["mae"]}[metric](val)
    if name == "digits":
        met = score >= 0.98
    elif name == "digits-imbalanced":
        met = score >= linear
    elif name == "digits-50":
        met = seconds < 120
    else:
        met = score >= linear - 0.01 if task == "classify" else score <= linear
    return {"data": name, "seed": seed, "metric": metric, "macro_f1": (
                macro_f1(val) if task == "classify" else None),
            "train_fit": score, "linear": linear, "met": met and seconds < SECONDS,
            "seconds": seconds, "epochs_run": summary["epochs_run"],
            "best_epoch": summary["best_epoch"], "lr": summary["chosen"]["lr"]["value"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0,1,2", help="Seeds of train fit, e.g. 0,1,2.")
    parser.add_argument("--only", default=",".join(DATASETS), help="Datasets to run.")
    parser.add_argument("--work", help="Folder for the data and runs (default: a new one).")
    parser.add_argument("--json", action="store_true", help="Print the rows as JSON too.")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-recipe-"))
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    print(f"{'data':<18} {'seed':>4} {'metric':>8} {'train fit':>10} {'linear':>8} "
          f"{'macro-F1':>8} {'met':>4} {'seconds':>8} {'epochs':>7} {'lr':>9}", flush=True)
    for name in args.only.split(","):
        packed, task = pack(name, work)
        linear = baseline(packed, task, balanced=name == "digits-imbalanced")
        for seed in map(int, args.seeds.split(",")):
            summary, seconds = fit(packed, work / "runs" / f"{name}-{seed}", seed)
            rows.append(row(name, task, summary, seconds, linear, seed))
            r = rows[-1]
            f1 = "" if r["macro_f1"] is None else f"{r['macro_f1']:.4f}"
            print(f"{name:<18} {seed:>4} {r['metric']:>8} {r['train_fit']:>10.4f} "
                  f"{linear:>8.4f} {f1:>8} {'yes' if r['met'] else 'NO':>4} {seconds:>8.1f} "
                  f"{r['epochs_run']:>3} ({r['best_epoch']}) {r['lr']:>9.3g}", flush=True)
    print(f"\n{sum(r['met'] for r in rows)} of {len(rows)} runs met their target; "
          f"work folder {work}")
    if args.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
