"""Reading a dataset from object storage through the part cache, against local disk.

    .venv/bin/python tools/bench_s3.py [IMAGE_FOLDER] [--shard-size 4MB] [--workers 2]

Starts moto's standalone S3 server on 127.0.0.1 (the `dev` extra installs it), packs
the image folder (default: /tmp/bench-images, else /tmp/pbdata/imagefolder, else 20,000
small JPEGs made by tools/make_images.py) into WebDataset shards on local disk and, with
`packer pack -o s3://`, into a bucket; then reads two epochs of each with `open_dataset`
and a DataLoader (batch 64, persistent workers), bytes only and decoded (PIL, resized
to 64 px):

    local disk                      page cache warm
    s3, cache_limit = 1/4 of data   epoch 1 (cold cache), epoch 2, peak cache size
    s3, cache_limit = all of it     epoch 1 (cold cache), epoch 2 (no network)

The peak cache size is polled every 10 ms. Figures print as a table (and --json).
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import packer
from packer.storage.cache import PartCache

BUCKET = "bench"


def start_moto() -> tuple[subprocess.Popen, str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                               str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return server, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    raise SystemExit("moto server did not start")


def image_folder(given: str | None, scratch: Path) -> Path:
    for candidate in filter(None, [given, "/tmp/bench-images", "/tmp/pbdata/imagefolder"]):
        if Path(candidate).is_dir():
            return Path(candidate)
    made = scratch / "images"
    subprocess.run([sys.executable, "tools/make_images.py", str(made)], check=True)
    return made


def epoch(dataset, loader, watch: PartCache | None, peak: list) -> float:
    """Samples/s of one epoch; `peak[0]` is raised to the cache's largest size seen."""
    done = threading.Event()

    def poll():
        while not done.is_set():
            peak[0] = max(peak[0], watch.usage())
            time.sleep(0.01)

    watcher = threading.Thread(target=poll) if watch else None
    if watcher:
        watcher.start()
    began, count = time.perf_counter(), 0
    for batch in loader:
        count += len(batch["__key__"])
    seconds = time.perf_counter() - began
    done.set()
    if watcher:
        watcher.join()
    assert count == len(dataset), (count, len(dataset))
    return count / seconds


def measure(url: str, decode: bool, workers: int, cache: Path | None, limit: int | None):
    options = {"decode": "rgb8", "image_size": 64} if decode else {"decode": "raw"}
    if cache is not None:
        shutil.rmtree(cache, ignore_errors=True)
        options |= {"cache_dir": cache, "cache_limit": limit}
    dataset = packer.open_dataset(url, shuffle=True, **options)
    peak = [0]
    watch = PartCache(cache, limit) if cache is not None else None
    loader = packer.DataLoader(dataset, batch_size=64, num_workers=workers,
                               persistent_workers=workers > 0)
    rates = []
    for number in range(2):
        dataset.set_epoch(number)
        rates.append(epoch(dataset, loader, watch, peak))
    return rates, peak[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("images", nargs="?")
    parser.add_argument("--shard-size", default="4MB")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-s3-"))
    server, endpoint = start_moto()
    os.environ.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="bench",
                      AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1",
                      XDG_CACHE_HOME=str(scratch / "xdg"))
    try:
        from packer.storage.client import client

        client().create_bucket(Bucket=BUCKET)
        images = image_folder(args.images, scratch)
        local, url = scratch / "wds", f"s3://{BUCKET}/wds"
        pack = [sys.executable, "-m", "packer", "pack", str(images), "--shard-size",
                args.shard_size, "-q", "-o"]
        subprocess.run([*pack, str(local)], check=True, stdout=subprocess.DEVNULL)
        began = time.perf_counter()
        subprocess.run([*pack, url], check=True, stdout=subprocess.DEVNULL)
        upload_s = time.perf_counter() - began
        data = sum(p.stat().st_size for p in local.glob("*.tar"))
        report = {"images": str(images), "shards": len(list(local.glob("*.tar"))),
                  "dataset_bytes": data, "pack_to_s3_s": round(upload_s, 2),
                  "workers": args.workers, "rows": []}
        for decode in (False, True):
            rows = [("local disk", str(local), None, None),
                    ("s3, limit 1/4", url, scratch / "cache", data // 4),
                    ("s3, limit all", url, scratch / "cache", 2 * data)]
            for name, where, cache, limit in rows:
                rates, peak = measure(where, decode, args.workers, cache, limit)
                report["rows"].append({"reader": name, "decode": decode, "epoch1": rates[0],
                                       "epoch2": rates[1], "cache_limit": limit,
                                       "peak_cache_bytes": peak if cache else None})
    finally:
        server.terminate()
        shutil.rmtree(scratch, ignore_errors=True)
    print_table(report)
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(report, indent=1))


def print_table(report: dict) -> None:
    print(f"{report['shards']} shards, {report['dataset_bytes'] / 1e6:.1f} MB from "
          f"{report['images']}; pack into the bucket {report['pack_to_s3_s']} s; "
          f"{report['workers']} workers, batch 64")
    print(f"{'reader':<15} {'decode':<7} {'epoch 1/s':>10} {'epoch 2/s':>10} "
          f"{'cache_limit MB':>14} {'peak cache MB':>13}")
    for row in report["rows"]:
        limit = f"{row['cache_limit'] / 1e6:.1f}" if row["cache_limit"] else "-"
        peak = f"{row['peak_cache_bytes'] / 1e6:.1f}" if row["peak_cache_bytes"] else "-"
        print(f"{row['reader']:<15} {'yes' if row['decode'] else 'bytes':<7} "
              f"{row['epoch1']:>10,.0f} {row['epoch2']:>10,.0f} {limit:>14} {peak:>13}")


if __name__ == "__main__":
    main()
