"""The append benchmark: adding 1,000 images to a 20,000-image dataset, against packing
those 1,000 alone and against packing all 21,000 again.

Usage:
    python tools/bench_append.py [--data DIR] [--base 20000] [--new 1000]
                                 [--formats webdataset,lmdb,hdf5,tfrecord] [--json FILE]

Without --data, the standard images (tools/make_images.py, BASE + NEW of them) are made
in a temporary folder first; with it, DIR holds at least BASE + NEW such images. The
first BASE images are the dataset's source, the next NEW the appended source (their own
keys, the same 10 classes), and a tree of hard links to all of them the source of the
full repack. Per format, each row runs `packer pack` once as a subprocess (-q,
--workers 1) on a warm page cache, in seconds of wall time:

    pack BASE         the dataset appended to (not compared; the starting point)
    append NEW        `packer pack NEW --append DATASET`: staging (links), reading the
                      dataset's keys, packing NEW (LMDB and HDF5: into a file of its
                      own), the swap
    pack NEW alone    `packer pack NEW -o OTHER`: what the new samples cost by themselves
    repack all        `packer pack ALL -o OTHER`: the alternative to appending

Outputs go to a temporary folder that is removed at the end.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_images import image_path, make_images  # noqa: E402

from packer.formats.manifests import local_manifest  # noqa: E402

FORMATS = ("webdataset", "lmdb", "hdf5", "tfrecord")


def _timed(*args: str) -> float:
    began = time.perf_counter()
    subprocess.run([sys.executable, "-m", "packer", *args, "-q"], check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - began


def _link_tree(data: Path, indexes: range, out: Path) -> None:
    """Hard links to the images `indexes` of the standard layout, in its layout."""
    for index in indexes:
        source = image_path(data, index)
        target = image_path(out, index)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.link(source, target)


def _warm(folder: Path) -> None:
    for path in folder.rglob("*.jpg"):
        path.read_bytes()


def bench(data: Path, base: int, new: int, formats: list[str], work: Path) -> list[dict]:
    trees = {"base": range(base), "new": range(base, base + new), "all": range(base + new)}
    for name, indexes in trees.items():
        _link_tree(data, indexes, work / name)
    _warm(work / "all")
    rows = []
    for fmt in formats:
        out = work / (f"{fmt}.h5" if fmt == "hdf5" else f"{fmt}-out")
        other = work / (f"{fmt}-other.h5" if fmt == "hdf5" else f"{fmt}-other")
        row = {"format": fmt,
               "pack_base_s": _timed("pack", str(work / "base"), "--to", fmt, "-o", str(out))}
        row["append_s"] = _timed("pack", str(work / "new"), "--append", str(out))
        appended = local_manifest(out)
        if appended["count"] != base + new or appended["appends"][-1]["count"] != new:
            raise SystemExit(f"{out}: {appended['count']:,} samples after the append, not "
                             f"{base + new:,}")
        row["pack_new_alone_s"] = _timed("pack", str(work / "new"), "--to", fmt, "-o",
                                         str(other))
        if other.is_dir():
            shutil.rmtree(other)
        else:
            other.unlink()
        row["repack_all_s"] = _timed("pack", str(work / "all"), "--to", fmt, "-o", str(other))
        rows.append(row)
        print(f"{fmt:<11} pack {base:,}: {row['pack_base_s']:6.2f} s   append {new:,}: "
              f"{row['append_s']:6.2f} s   pack {new:,} alone: {row['pack_new_alone_s']:6.2f} s"
              f"   repack {base + new:,}: {row['repack_all_s']:6.2f} s", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, help="the standard images (default: made now)")
    parser.add_argument("--base", type=int, default=20_000, help="images in the dataset")
    parser.add_argument("--new", type=int, default=1_000, help="images appended")
    parser.add_argument("--formats", default=",".join(FORMATS),
                        help="comma-separated formats (default: all four)")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-append-") as temp:
        work = Path(temp)
        data = args.data
        if data is None:
            data = work / "images"
            make_images(data, args.base + args.new, 0, 2)
        rows = bench(data, args.base, args.new, args.formats.split(","), work)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
