"""The README's demo: an image folder packed three ways, inspected, verified, read and
trained on, with the score beside a linear model's.

Usage:
    python tools/demo.py [DIR]      (default ./demo; made anew each run)

It writes scikit-learn's 1,797 handwritten digits (8x8 scans, bundled with
scikit-learn) as 16x16 grey PNGs in one folder per digit, adds a few inputs that
must be skipped (an empty file, a truncated PNG, a text file named .png) and some OS
junk, then runs the `packer` commands a user would, printing each one first, a short
`packer bench` of loose against packed reads, and `train fit` on the shards with
its defaults (a fifth held out). It ends with the validation accuracy beside a
logistic regression fitted on the same split.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from sklearn_data import linear_baseline, write_digits  # noqa: E402

HELD_OUT = 0.2


def packer(*args) -> None:
    command = ["packer", *map(str, args)]
    print(f"\n$ {' '.join(command)}", flush=True)
    subprocess.run([sys.executable, "-m", "packer", *map(str, args)], check=True)


def make_folder(images: Path) -> None:
    write_digits(images, size=16)
    good = (images / "0" / "0000.png").read_bytes()
    (images / "1" / "empty.png").write_bytes(b"")
    (images / "2" / "truncated.png").write_bytes(good[: len(good) // 2])
    (images / "3" / "notes.png").write_text("not an image")
    (images / "4" / ".DS_Store").write_bytes(b"junk")
    print(f"made {images}: 1,797 digit PNGs in 10 class folders, 3 bad files, 1 junk file")


def logistic_accuracy(packed: Path) -> float:
    """A logistic regression on the pixels of the same split train fit used."""
    import packer as library

    sides = {}
    for side in ("train", "val"):
        data = library.open_dataset(str(packed), holdout=(HELD_OUT, side))
        batches = list(library.DataLoader(data, batch_size=512))
        pixels = np.concatenate([b["png"][:, 0].reshape(len(b["png"]), -1).numpy()
                                 for b in batches])
        sides[side] = pixels, np.concatenate([b["cls"].numpy() for b in batches])
    features = np.concatenate([sides["train"][0], sides["val"][0]]).astype(np.float32)
    labels = np.concatenate([sides["train"][1], sides["val"][1]])
    rows = np.arange(len(labels))
    train = len(sides["train"][1])
    return linear_baseline(features, labels, "classify", rows[:train], rows[train:])


def main() -> None:
    demo = Path(sys.argv[1] if len(sys.argv) > 1 else "demo")
    shutil.rmtree(demo, ignore_errors=True)
    images = demo / "images"
    make_folder(images)
    for fmt, name in [("webdataset", "images-wds"), ("lmdb", "images.lmdb"),
                      ("hdf5", "images.h5")]:
        shards = ["--shard-size", "1MB"] if fmt == "webdataset" else []
        packer("pack", images, "--to", fmt, "-o", demo / name, "--workers", "2", *shards)
    packer("inspect", demo / "images-wds")
    for name in ("images-wds", "images.lmdb", "images.h5"):
        packer("verify", demo / name, "--against", images, "-q")
    packer("unpack", demo / "images.h5", "-o", demo / "restored", "-q")
    packer("bench", images, demo / "images-wds", demo / "images.lmdb", demo / "images.h5",
           "--workers", "0,2", "--repeat", "1", "-q")
    command = ["train", "fit", str(demo / "images-wds"), "--val-split", str(HELD_OUT),
               "--out", str(demo / "run")]
    print(f"\n$ {' '.join(command)}", flush=True)
    subprocess.run([sys.executable, "-m", *command], check=True)
    summary = json.loads((demo / "run" / "summary.json").read_text())
    accuracy = summary["best"]["val"]["accuracy"]
    print(f"\ndigits, {HELD_OUT:.0%} held out: train fit {accuracy:.1%} validation accuracy "
          f"(best epoch {summary['best_epoch']} of {summary['epochs_run']}), logistic "
          f"regression {logistic_accuracy(demo / 'images-wds'):.1%} on the same split; "
          f"{summary['data_wait_share']:.0%} of step time spent waiting for data")


if __name__ == "__main__":
    main()
