"""`packer bench`: the same samples read loose and packed, measured side by side.

For every reader (a loose folder read by a map-style Dataset as people write it
by hand with PIL, and each packed dataset read by `open_dataset`) and every worker
count, one pass (or `samples`) through a DataLoader with the same batch size and
decode work, repeated with the readers in alternating order. Reported per run:
samples/s, MB/s, time to the first batch, and the peak RSS and PSS of the process
tree (PSS counts pages shared by forked workers once). Beside them, the ceilings
measured on the same data: `cat` of each reader's files (IO), and the single-core
decode rate times the cores (CPU).
"""

import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from packer.bench.probes import MemoryPeak, drop_cache, drop_took_effect
from packer.errors import UsageProblem
from packer.formats import format_module
from packer.formats.manifests import is_packed
from packer.read.dataloader import DataLoader
from packer.read.dataset import load_manifest, open_parts
from packer.read.loader import open_dataset
from packer.read.loose import LooseImages, loose_images
from packer.read.pixels import rgb8_tensor
from packer.sources.files.read import read_file
from packer.storage.url import is_s3


@dataclass
class BenchOptions:
    workers: list[int] = field(default_factory=lambda: [0, 1, 2])
    batch_size: int = 64
    samples: int | None = None
    repeat: int = 3
    cold: bool = False
    decode: bool = True
    image_size: int = 64
    cache_dir: str | None = None  # the part cache of s3:// datasets, and its limit
    cache_limit: int | str | None = None


@dataclass
class Contender:
    """One of the readers compared: a loose folder, or a packed dataset."""

    name: str  # the path as given
    kind: str  # "loose" or the packed format
    files: list[str]  # what `cat` reads and the cold cache drops
    count: int
    bytes: int
    labels: list[int] = field(default_factory=list)  # loose: the label of each file
    stored: str = "as the files are"  # the images' resolution and encoding, as stored
    remote_bytes: int | None = None  # in object storage: the bytes of its objects

    @property
    def stored_bytes(self) -> int:
        if self.remote_bytes is not None:
            return self.remote_bytes
        return sum(Path(f).stat().st_size for f in self.files)

    def dataset(self, options: BenchOptions, cache_dir=None):
        if self.kind == "loose":
            return LooseImages(list(zip(self.files, self.labels, strict=True)),
                               options.image_size, options.decode)
        return open_dataset(self.name, shuffle=True, decode="rgb8" if options.decode else "raw",
                            image_size=options.image_size,
                            cache_dir=cache_dir or options.cache_dir,
                            cache_limit=options.cache_limit)


def stored_text(manifest: dict) -> str:
    """`64x64, raw pixels`, `shorter side 64, jpeg:90`, or `as packed` (the source's)."""
    record = manifest.get("transform")
    if not record:
        return "as packed"
    size = record.get("size")
    rule = record.get("resize")
    resolution = (f"{size[0]}x{size[1]} ({record['resize_mode']})" if size
                  else f"longer side at most {rule[4:]}" if rule and rule.startswith("max:")
                  else f"shorter side {rule}" if rule else "source size")
    encoding = "raw pixels" if record["encode"] == "raw" else record["encode"]
    return f"{resolution}, {encoding}"


def contender(path: str, options: BenchOptions) -> Contender:
    """A reader of `path`: a packed dataset, or a loose folder of images (bad inputs
    left out, as packing leaves them out, so that every reader reads the same samples).
    A dataset (or plain shards) in object storage is read through the part cache: no
    local files to `cat` or to drop from the page cache; its first pass downloads the
    parts, and a cold pass starts from an empty cache."""
    if is_s3(path):
        remote = open_parts(path, options.cache_dir, options.cache_limit)
        # each part's own file (its data, as `cat` reads a local dataset's)
        size, manifest = sum(files[0].size for files in remote.part_files), remote.manifest
        if manifest is None:
            return Contender(path, "webdataset", [], remote.count, size, remote_bytes=size,
                             stored="as the shards hold them")
        data = sum(f["bytes"] for f in manifest["fields"].values())
        return Contender(path, manifest["format"], [], manifest["count"], data,
                         stored=stored_text(manifest), remote_bytes=size)
    folder = Path(path)
    if not folder.is_dir() and not is_packed(folder):
        raise UsageProblem(f"{path}: not a folder or a packed dataset")
    if is_packed(folder):
        manifest = load_manifest(folder)
        files = format_module(manifest["format"]).data_files(folder, manifest)
        data = sum(f["bytes"] for f in manifest["fields"].values())
        return Contender(path, manifest["format"], [str(f) for f in files], manifest["count"],
                         data, stored=stored_text(manifest))
    kept = loose_images(folder)
    files = [name for name, _ in kept]
    return Contender(path, "loose", files, len(files), sum(Path(f).stat().st_size for f in files),
                  [label for _, label in kept])


def cat_rate(reader: Contender, cold: bool) -> float:
    """Samples/s that reading the reader's files end to end gives (the IO ceiling)."""
    if cold:
        drop_cache(reader.files)
    began = time.perf_counter()
    for path in reader.files:
        with open(path, "rb", buffering=0) as file:
            while file.read(1 << 22):
                pass
    return reader.count / (time.perf_counter() - began)


def decode_limit(reader: Contender, image_size: int, sample_count: int = 500) -> float:
    """Single-core decode+resize rate of the reader's images, times the cores."""
    images = [(read_file(p), Path(p).suffix[1:].lower()) for p in reader.files[:sample_count]]
    began = time.perf_counter()
    for data, kind in images:
        rgb8_tensor(data, (image_size, image_size), kind)
    rate = len(images) / (time.perf_counter() - began)
    return rate * (os.cpu_count() or 1)


def run_once(reader: Contender, workers: int, options: BenchOptions, cold: bool) -> dict:
    if cold:
        drop_cache(reader.files)
    if cold and reader.remote_bytes is not None:  # every part downloaded again
        with tempfile.TemporaryDirectory(prefix="packer-bench-", dir=options.cache_dir) as empty:
            return _one_pass(reader, reader.dataset(options, empty), workers, options)
    return _one_pass(reader, reader.dataset(options), workers, options)


def _one_pass(reader: Contender, dataset, workers: int, options: BenchOptions) -> dict:
    # packed datasets through packer's loader, which makes batches in the workers
    loader = (torch.utils.data.DataLoader if reader.kind == "loose" else DataLoader)(
        dataset, batch_size=options.batch_size, num_workers=workers,
        shuffle=reader.kind == "loose", collate_fn=None if options.decode else list)
    limit = options.samples or reader.count
    seen, first = 0, None
    with MemoryPeak() as memory:
        began = time.perf_counter()
        for batch in loader:
            first = first or time.perf_counter() - began
            seen += _batch_len(batch)
            if seen >= limit:
                break
        seconds = time.perf_counter() - began
    seen = min(seen, limit)
    return {"samples": seen, "seconds": seconds, "samples_per_s": seen / seconds,
            "mb_per_s": seen * reader.bytes / reader.count / 1e6 / seconds,
            "first_batch_s": first, "peak_rss_mb": memory.rss / 1e6,
            "peak_pss_mb": memory.pss / 1e6}


def _batch_len(batch) -> int:
    if isinstance(batch, dict):
        return len(batch["__key__"])
    if isinstance(batch, list | tuple) and batch and isinstance(batch[0], torch.Tensor):
        return len(batch[0])
    return len(batch)


def _summary(runs: list[dict]) -> dict:
    rates = [r["samples_per_s"] for r in runs]
    return {"samples": runs[0]["samples"], "samples_per_s": statistics.median(rates),
            "spread": [min(rates), max(rates)],
            "mb_per_s": statistics.median(r["mb_per_s"] for r in runs),
            "first_batch_s": statistics.median(r["first_batch_s"] for r in runs),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
            "peak_pss_mb": max(r["peak_pss_mb"] for r in runs)}


def bench(paths: list[str], options: BenchOptions, progress=print) -> dict:
    """Measure every reader at every worker count; returns the figures as a dict."""
    if any(w < 0 for w in options.workers):
        raise UsageProblem("--workers: worker counts must be 0 or more")
    readers = [contender(p, options) for p in paths]
    caches = ["warm", "cold"] if options.cold else ["warm"]
    runs: dict[tuple[str, str, int], list] = {}
    for repeat in range(options.repeat):
        order = readers if repeat % 2 == 0 else readers[::-1]
        for cache in caches:
            for workers in options.workers:
                for reader in order:
                    progress(f"repeat {repeat + 1}/{options.repeat}: {reader.name}, {cache}, "
                             f"{workers} workers")
                    runs.setdefault((reader.name, cache, workers), []).append(
                        run_once(reader, workers, options, cold=cache == "cold"))
    loose = next((r for r in readers if r.kind == "loose"), None)
    results = []
    for (name, cache, workers), measured in runs.items():
        row = {"reader": name, "cache": cache, "workers": workers, **_summary(measured)}
        if loose is not None:
            base = _summary(runs[(loose.name, cache, workers)])["samples_per_s"]
            row["vs_loose"] = row["samples_per_s"] / base
        results.append(row)
    ceilings = {r.name: {"cat_samples_per_s": cat_rate(r, options.cold),
                         "kind": r.kind, "count": r.count} for r in readers if r.files}
    stored = {r.name: {"bytes": r.stored_bytes, "images": r.stored} for r in readers}
    if options.decode and loose is not None:
        ceilings["decode_limit_samples_per_s"] = decode_limit(loose, options.image_size)
    return {"options": options.__dict__, "cold_drop_works": _cold_check(readers, options),
            "stored": stored, "results": results, "ceilings": ceilings,
            "recommend": recommend(results)}


def _cold_check(readers: list[Contender], options: BenchOptions) -> bool | None:
    local = [f for r in readers for f in r.files]
    if not options.cold or not local:
        return None
    biggest = max(local, key=lambda f: Path(f).stat().st_size)
    return drop_took_effect(biggest)


def recommend(results: list[dict]) -> dict[str, int]:
    """Per reader, the fewest workers within 5% of its best throughput (warm cache)."""
    best: dict[str, int] = {}
    for name in {r["reader"] for r in results}:
        rows = sorted((r for r in results if r["reader"] == name and r["cache"] == "warm"),
                      key=lambda r: r["workers"])
        top = max(r["samples_per_s"] for r in rows)
        best[name] = next(r["workers"] for r in rows if r["samples_per_s"] >= 0.95 * top)
    return best


def _times(ratio: float | None) -> str:
    """A rate beside the loose files' ("n/a" where no loose folder was read)."""
    return "n/a" if ratio is None else f"{ratio:.2f}x"


def table(report: dict) -> str:
    lines = [f"{'reader':<28} {'cache':<5} {'workers':>7} {'samples/s':>10} {'MB/s':>7} "
             f"{'first s':>8} {'RSS MB':>7} {'PSS MB':>7} {'vs loose':>8}"]
    for r in report["results"]:
        lines.append(f"{r['reader'][-28:]:<28} {r['cache']:<5} {r['workers']:>7} "
                     f"{r['samples_per_s']:>10,.0f} "
                     f"{r['mb_per_s']:>7.1f} {r['first_batch_s']:>8.3f} {r['peak_rss_mb']:>7.0f} "
                     f"{r['peak_pss_mb']:>7.0f} {_times(r.get('vs_loose')):>8}")
    for name, stored in report.get("stored", {}).items():
        lines.append(f"stored, {name}: {stored['bytes'] / 1e6:,.1f} MB, images "
                     f"{stored['images']}")
    for name, ceiling in report["ceilings"].items():
        if isinstance(ceiling, dict):
            lines.append(f"ceiling, cat of {name}: {ceiling['cat_samples_per_s']:,.0f} samples/s")
        else:
            lines.append(f"ceiling, decode on every core: {ceiling:,.0f} samples/s")
    if report["cold_drop_works"] is not None:
        lines.append("page cache drop: " + ("took effect" if report["cold_drop_works"] else
                                            "did NOT take effect; cold figures are warm"))
    lines += [f"recommended num_workers for {name}: {w}"
              for name, w in sorted(report["recommend"].items())]
    return "\n".join(lines)


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.5))
    lines = dict.fromkeys((r["reader"], r["cache"]) for r in report["results"])
    colours = {name: f"C{i}" for i, name in enumerate(dict.fromkeys(n for n, _ in lines))}
    for name, cache in lines:
        rows = sorted((r for r in report["results"] if (r["reader"], r["cache"]) == (name, cache)),
                      key=lambda r: r["workers"])
        axes.plot([r["workers"] for r in rows], [r["samples_per_s"] for r in rows], marker="o",
                  linestyle="-" if cache == "warm" else "--", color=colours[name],
                  label=f"{name} ({cache})")
    axes.set(xlabel="DataLoader workers", ylabel="samples/s", title="packer bench")
    axes.set_xticks(sorted({r["workers"] for r in report["results"]}))
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)

