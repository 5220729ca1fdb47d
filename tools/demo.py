"""The README's demo: make a small image folder, pack it three ways, inspect and verify.

Usage:
    python tools/demo.py [DIR]      (default ./demo; made anew each run)

It makes 1,000 small JPEGs in 10 class folders, adds a few inputs that must be
skipped (an empty file, a truncated JPEG, a text file named .jpg) and some OS
junk, then runs the `packer` commands a user would, printing each one first,
a short `packer bench` of loose against packed reads, and a few epochs of
`train fit` on the shards (the classes are learnable: each has a coloured mark).
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from make_images import make_images  # noqa: E402


def packer(*args) -> None:
    command = ["packer", *map(str, args)]
    print(f"\n$ {' '.join(command)}", flush=True)
    subprocess.run([sys.executable, "-m", "packer", *map(str, args)], check=True)


def main() -> None:
    demo = Path(sys.argv[1] if len(sys.argv) > 1 else "demo")
    shutil.rmtree(demo, ignore_errors=True)
    images = demo / "images"
    make_images(images, count=1000, seed=0, workers=2)
    good = (images / "class_00" / "img_000000.jpg").read_bytes()
    (images / "class_01" / "empty.jpg").write_bytes(b"")
    (images / "class_02" / "truncated.jpg").write_bytes(good[: len(good) // 2])
    (images / "class_03" / "notes.jpg").write_text("not an image")
    (images / "class_04" / ".DS_Store").write_bytes(b"junk")
    print(f"made {images}: 1,000 JPEGs in 10 class folders, 3 bad files, 1 junk file")

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
    command = ["train", "fit", str(demo / "images-wds"), "--epochs", "6", "--image-size", "32",
               "--val-split", "0.2", "--lr", "2e-3", "--out", str(demo / "run")]
    print(f"\n$ {' '.join(command)}", flush=True)
    subprocess.run([sys.executable, "-m", *command], check=True)
    summary = json.loads((demo / "run" / "summary.json").read_text())
    print(f"best validation accuracy {summary['best']['val']['accuracy']:.1%} (epoch "
          f"{summary['best_epoch']}); {summary['data_wait_share']:.0%} of step time spent "
          "waiting for data")


if __name__ == "__main__":
    main()
