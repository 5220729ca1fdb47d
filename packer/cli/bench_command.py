"""`packer bench`: loose against packed reads, as a table, JSON and a plot."""

import json
from pathlib import Path

import click

from packer.cli.options import cache_options, quiet_option


def _worker_counts(ctx, param, value: str) -> list[int]:
    try:
        counts = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"{value!r}: give worker counts like 0,1,2,4") from None
    if not counts or min(counts) < 0:
        raise click.BadParameter(f"{value!r}: worker counts must be 0 or more")
    return counts


@click.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--workers", default="0,1,2", show_default=True, callback=_worker_counts,
              help="DataLoader worker counts to measure, comma-separated.")
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True,
              help="Samples per batch, the same for every reader.")
@click.option("--samples", type=click.IntRange(min=1),
              help="Read only this many samples per run (default: one full pass).")
@click.option("--repeat", type=click.IntRange(min=1), default=3, show_default=True,
              help="Runs per reader and worker count; the median is reported.")
@click.option("--cold", is_flag=True,
              help="Also measure with each reader's files dropped from the page cache "
                   "(s3:// datasets: read through an empty part cache).")
@click.option("--decode/--no-decode", default=True, show_default=True,
              help="Decode images to tensors, or read bytes only (pure IO).")
@click.option("--image-size", type=click.IntRange(min=1), default=64, show_default=True,
              help="Decoded images are resized to this square size.")
@click.option("--json", "json_path", type=click.Path(path_type=Path),
              help="Write every figure to this JSON file.")
@click.option("--plot", "plot_path", type=click.Path(path_type=Path),
              help="Draw samples/s against workers to this PNG file.")
@cache_options
@quiet_option
def bench(paths, workers, batch_size, samples, repeat, cold, decode, image_size, json_path,
          plot_path, cache_dir, cache_limit, quiet):
    """Read the same samples loose and packed, and show which is faster, and how much.

    PATHS are a loose folder (read as people do by hand: one PIL open per file) and
    packed datasets of it. Prints samples/s, MB/s, time to the first batch and peak
    memory for each reader and worker count, the ceilings (cat of the files, decode
    on every core), and the num_workers to use.

    \b
    Example:
      packer bench ./images ./images-wds ./images.lmdb ./images.h5 --workers 0,1,2,4
      packer bench ./images ./images-wds --cold --json bench.json --plot bench.png
      packer bench ./images-wds s3://bucket/images-wds   # read through the part cache
      packer bench s3://bucket/images-wds --cold --cache-dir /scratch/c --cache-limit 5GB
    """
    from packer.bench.measure import BenchOptions, plot, table
    from packer.bench.measure import bench as run_bench

    options = BenchOptions(workers, batch_size, samples, repeat, cold, decode, image_size,
                           cache_dir and str(cache_dir), cache_limit)
    report = run_bench(list(paths), options,
                       progress=(lambda _: None) if quiet else (lambda m: click.echo(m, err=True)))
    click.echo(table(report))
    if json_path:
        json_path.write_text(json.dumps(report, indent=1))
    if plot_path:
        plot(report, plot_path)
