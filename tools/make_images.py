"""Make the standard packing benchmark dataset: many small, realistic JPEGs.

Usage:
    python tools/make_images.py OUT [--count 20000] [--seed 0] [--workers 2]

Writes COUNT JPEGs in an ImageFolder layout, spread evenly over 10 class folders:

    OUT/class_00/img_000000.jpg, OUT/class_01/img_000001.jpg, ...

Each image is 64 to 160 px per side (width and height drawn separately): a
smooth colour gradient, 6 to 15 random ellipses, rectangles and lines, a slight
blur and mild noise, saved at JPEG quality 85. Files average about 4.5 KB (4.48
KB for the default seed), like a small photo dataset. The output depends only
on --seed (and --count), never on --workers: image i is drawn from its own
random stream, seeded by (seed, i).

Needs only numpy and Pillow. Prints the count, total MB, average KB and seconds.
The module can also be imported: `make_images(out, count, seed, workers)`.
"""

import argparse
import os
import time
from multiprocessing import Pool
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

CLASSES = 10
QUALITY = 85
MIN_SIDE, MAX_SIDE = 64, 160
CHUNK = 250  # images per unit of pool work


def image_path(out: Path, index: int) -> Path:
    return out / f"class_{index % CLASSES:02d}" / f"img_{index:06d}.jpg"


# Each class has a mark (a disc of its own colour) drawn over the scene, so that a
# model trained on the dataset has something to learn.
CLASS_COLOURS = [(230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200), (245, 130, 48),
                 (145, 30, 180), (70, 240, 240), (240, 50, 230), (250, 250, 250), (0, 0, 0)]


def draw_image(rng: np.random.Generator, label: int = 0) -> Image.Image:
    """One synthetic 'photo': gradient background, a few blurred shapes, the class's
    mark, noise."""
    width, height = (int(v) for v in rng.integers(MIN_SIDE, MAX_SIDE + 1, size=2))
    # Background: a bilinear blend of four random corner colours.
    corners = rng.uniform(0, 255, size=(2, 2, 3))
    ys = np.linspace(0.0, 1.0, height)[:, None, None]
    xs = np.linspace(0.0, 1.0, width)[None, :, None]
    top = corners[0, 0] * (1 - xs) + corners[0, 1] * xs
    bottom = corners[1, 0] * (1 - xs) + corners[1, 1] * xs
    pixels = top * (1 - ys) + bottom * ys
    image = Image.fromarray(pixels.astype(np.uint8), "RGB")
    # Foreground: a few ellipses, rectangles and lines, softened a little.
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(6, 16))):
        x0, x1 = sorted(rng.integers(-width // 4, width + width // 4, size=2))
        y0, y1 = sorted(rng.integers(-height // 4, height + height // 4, size=2))
        colour = tuple(int(c) for c in rng.integers(0, 256, size=3))
        box = (int(x0), int(y0), int(x1) + 4, int(y1) + 4)
        shape = rng.random()
        if shape < 0.5:
            draw.ellipse(box, fill=colour)
        elif shape < 0.75:
            draw.rectangle(box, fill=colour)
        else:
            draw.line(box, fill=colour, width=int(rng.integers(1, 4)))
    radius = min(width, height) // 5
    cx, cy = int(rng.integers(radius, width - radius)), int(rng.integers(radius, height - radius))
    draw.ellipse((cx - radius, cy - radius, cx + radius, cy + radius),
                 fill=CLASS_COLOURS[label % len(CLASS_COLOURS)])
    image = image.filter(ImageFilter.GaussianBlur(radius=float(rng.uniform(0.3, 0.8))))
    # Mild sensor-like noise, which is what makes JPEGs of this size a few KB.
    noisy = np.asarray(image, dtype=np.float32)
    noisy += rng.normal(0.0, float(rng.uniform(8.0, 12.0)), size=noisy.shape)
    return Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8), "RGB")


def _make_range(job: tuple[str, int, int, int]) -> int:
    """Write images start..stop-1; returns the bytes written."""
    out, seed, start, stop = job
    total = 0
    for index in range(start, stop):
        rng = np.random.default_rng([seed, index])
        path = image_path(Path(out), index)
        draw_image(rng, index % CLASSES).save(path, "JPEG", quality=QUALITY)
        total += path.stat().st_size
    return total


def make_images(out: Path, count: int = 20_000, seed: int = 0,
                workers: int | None = None) -> dict:
    """Write the dataset to `out`; returns {count, bytes, seconds}."""
    out = Path(out)
    workers = workers or os.cpu_count() or 1
    for c in range(CLASSES):
        (out / f"class_{c:02d}").mkdir(parents=True, exist_ok=True)
    jobs = [(str(out), seed, i, min(i + CHUNK, count)) for i in range(0, count, CHUNK)]
    began = time.perf_counter()
    if workers == 1:
        sizes = list(map(_make_range, jobs))
    else:
        with Pool(workers) as pool:
            sizes = pool.map(_make_range, jobs, chunksize=1)
    return {"count": count, "bytes": sum(sizes), "seconds": time.perf_counter() - began}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="output folder (created)")
    parser.add_argument("--count", type=int, default=20_000, help="images (default 20000)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--workers", type=int, default=os.cpu_count(),
                        help="processes (default: all cores)")
    args = parser.parse_args()
    stats = make_images(args.out, args.count, args.seed, args.workers)
    print(f"{stats['count']} images in {args.out}: {stats['bytes'] / 1e6:.1f} MB, "
          f"average {stats['bytes'] / max(stats['count'], 1) / 1e3:.2f} KB, "
          f"{stats['seconds']:.1f} s")


if __name__ == "__main__":
    main()
