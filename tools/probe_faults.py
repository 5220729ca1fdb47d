"""Probe packer from outside as an adversary would, and count the outcomes.

Usage:
    python tools/probe_faults.py WORK [--images 3000] [--kills 20] [--damages 40] [--seed 0]
                                      [--s3 N] [--loader N] [--formats webdataset,...] [--json]

Three probes, each a fresh `packer` process per try:
- kills: `packer pack` killed with SIGKILL at a random moment, for every format, then
  `--resume`; survived when the result reads back the same samples as an uninterrupted
  pack (and nothing looked complete before the resume);
- HDF5 resume: of the parts an interrupted HDF5 pack had closed, the share its resume kept;
- damaged datasets: a random byte range of a data file or manifest flipped, cut or
  zeroed, then `verify`, `unpack` and `inspect`; handled when each ends with exit 0 and
  the right data, or a non-zero exit and a message, never a traceback or a signal.

With `--loader N`, the probes of tools/probe_loader.py too (batches of fork and spawn
workers put on a torch queue, N epochs each; a file in every extension Pillow writes,
packed with --resize). With `--s3 N`, the `s3://` probes of tools/probe_s3.py too, N
tries each (packs killed and resumed with other options, concurrent writers, objects
rewritten, grown, cut or flipped in the bucket, a damaged cache), on a moto server of
their own; `--formats ''` runs them alone.

Prints one table of counts (and `--json` for scripts). Makes its own images under WORK.
"""

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from make_images import make_images  # noqa: E402
from probe_loader import probe_loader  # noqa: E402
from probe_s3 import OUTCOMES, probe_s3  # noqa: E402

import packer  # noqa: E402
from packer.errors import PackerError  # noqa: E402
from packer.formats import FORMAT_NAMES  # noqa: E402

SMALL_PARTS = ("import sys, packer.formats.protocol as p; p.BLOCK_COUNT = 500; "
               "from packer.cli import main; sys.argv[0] = 'packer'; main()")


def packer_run(*args, timeout=300):
    return subprocess.run([sys.executable, "-c", SMALL_PARTS, *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def output_of(fmt: str, work: Path, name: str) -> Path:
    return work / (f"{name}.h5" if fmt == "hdf5" else name)


def pack_args(images: Path, fmt: str, out: Path) -> list:
    shard = ["--max-count", "500"] if fmt in ("webdataset", "tfrecord") else []
    return ["pack", images, "--to", fmt, "-o", out, "-q", *shard]


def kill_once(images: Path, fmt: str, work: Path, reference: list, rng) -> dict:
    out = output_of(fmt, work, "killed")
    for stale in work.glob("killed*"):
        shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
    process = subprocess.Popen([sys.executable, "-c", SMALL_PARTS,
                                *map(str, pack_args(images, fmt, out))],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(rng.uniform(0.2, 2.5))
    process.send_signal(signal.SIGKILL)
    process.wait()
    if out.exists():  # killed after the publish: it must be the whole dataset
        return {"survived": _samples(out) == reference, "closed": 0, "kept": 0}
    partial = out.with_name(out.name + ".partial") / "progress.json"
    closed = sum(p["count"] for p in json.loads(partial.read_text())["parts"]) \
        if partial.exists() else 0
    resumed = packer_run(*pack_args(images, fmt, out), "--resume")
    return {"survived": resumed.returncode == 0 and _samples(out) == reference,
            "closed": closed, "kept": closed if "from the start" not in resumed.stderr else 0}


def _samples(dataset: Path) -> list | None:
    try:
        return list(packer.iter_samples(dataset))
    except PackerError:
        return None


def damage_once(dataset: Path, work: Path, reference: list, rng) -> bool:
    copy = work / ("damaged" + dataset.suffix)
    shutil.rmtree(copy, ignore_errors=True) if copy.is_dir() else copy.unlink(missing_ok=True)
    (shutil.copytree if dataset.is_dir() else shutil.copyfile)(dataset, copy)
    files = [f for f in (copy.rglob("*") if copy.is_dir() else [copy])
             if f.is_file() and f.stat().st_size]
    target = rng.choice(files)
    data = bytearray(target.read_bytes())
    start = rng.randrange(len(data))
    length = rng.choice([1, 8, 512, 4096])
    how = rng.choice(["flip", "zero", "cut"])
    if how == "cut":
        del data[start:]
    else:
        for at in range(start, min(len(data), start + length)):
            data[at] = data[at] ^ 0xFF if how == "flip" else 0
    target.write_bytes(bytes(data))
    clean = True
    for command in (["verify", copy, "-q"], ["unpack", copy, "-o", work / "restored", "-q"],
                    ["inspect", copy]):
        shutil.rmtree(work / "restored", ignore_errors=True)
        try:
            done = packer_run(*command, timeout=60)
        except subprocess.TimeoutExpired:
            print(f"hung: packer {' '.join(map(str, command))} (damage kept in {target}.hung)",
                  file=sys.stderr)
            shutil.copyfile(target, f"{target}.hung")
            return False
        problem = ("a signal" if done.returncode < 0 else
                   "a traceback" if "Traceback" in done.stderr else
                   "no message" if done.returncode and not (done.stdout + done.stderr).strip()
                   else "OK, but wrong samples" if command[0] == "verify"
                   and done.returncode == 0 and _samples(copy) != reference else None)
        if problem:
            print(f"{problem}: packer {command[0]} after a {how} of {length} at byte {start} "
                  f"of {target.name}: {done.stderr.strip()[-300:]}", file=sys.stderr)
            clean = False
    return clean


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("work", type=Path)
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--kills", type=int, default=20, help="kills per format")
    parser.add_argument("--damages", type=int, default=40, help="damaged copies per format")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--formats", default=",".join(FORMAT_NAMES))
    parser.add_argument("--s3", type=int, default=0, metavar="N",
                        help="tries of each s3:// probe (0: none)")
    parser.add_argument("--loader", type=int, default=0, metavar="N",
                        help="epochs of each slots probe, and the transform probe (0: none)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rng, work = random.Random(args.seed), args.work
    work.mkdir(parents=True, exist_ok=True)
    images = work / "images"
    if not images.exists():
        make_images(images, args.images, args.seed, os.cpu_count() or 1)
    results = {}
    for fmt in filter(None, args.formats.split(",")):
        good = output_of(fmt, work, f"good-{fmt}")
        if not good.exists():
            packer_run(*pack_args(images, fmt, good))
        reference = list(packer.iter_samples(good))
        kills = [kill_once(images, fmt, work, reference, rng) for _ in range(args.kills)]
        damaged = [damage_once(good, work, reference, rng) for _ in range(args.damages)]
        results[fmt] = {"kills": len(kills), "survived": sum(k["survived"] for k in kills),
                        "closed_samples": sum(k["closed"] for k in kills),
                        "kept_samples": sum(k["kept"] for k in kills),
                        "damaged": len(damaged), "handled": sum(damaged)}
    s3 = probe_s3(work, images, args.s3, rng) if args.s3 else {}
    s3.update(probe_loader(work, images, args.loader) if args.loader else {})
    if args.json:
        print(json.dumps({**results, "s3": s3}, indent=2))
        return
    if s3:
        print(f"{'probe':<19} {'runs':>5} " + " ".join(f"{o:>9}" for o in OUTCOMES))
        for name, counts in s3.items():
            print(f"{name:<19} {sum(counts.values()):>5} "
                  + " ".join(f"{counts[o]:>9}" for o in OUTCOMES))
    if results:
        print(f"{'format':<11} {'kills survived':>15} {'kept on resume':>15} "
              f"{'damaged handled':>16}")
    for fmt, r in results.items():
        kept = r["kept_samples"] / r["closed_samples"] if r["closed_samples"] else 1.0
        print(f"{fmt:<11} {r['survived']:>7} of {r['kills']:<5} {kept:>14.0%} "
              f"{r['handled']:>8} of {r['damaged']:<5}")


if __name__ == "__main__":
    main()
