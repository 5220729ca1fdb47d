"""`packer view`: a packed dataset as one self-contained HTML page."""

from pathlib import Path

import click

from packer.cli.options import Location, cache_options, quiet_option, show_progress
from packer.text import plural
from packer.view import DEFAULT_MAX_SAMPLES, DEFAULT_PER_CLASS


@click.command()
@click.argument("dataset", type=Location())
@click.option("-o", "--output", "out", type=click.Path(path_type=Path, dir_okay=False),
              required=True, help="The HTML file to write, e.g. -o view.html.")
@click.option("--per-class", type=click.IntRange(min=1), default=DEFAULT_PER_CLASS,
              show_default=True,
              help="Random samples shown per class (thumbnails; a click shows the full "
                   "image and every field), e.g. --per-class 16.")
@click.option("--max-samples", type=click.IntRange(min=0), default=DEFAULT_MAX_SAMPLES,
              show_default=True,
              help="Read at most this many samples, picked at random, for the grids, the "
                   "image sizes and the problems (the counts of all samples come from "
                   "the manifest); 0 reads them all, e.g. --max-samples 0.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the random choice of samples: the same seed, the same page, "
                   "e.g. --seed 1 for other samples.")
@cache_options
@quiet_option
def view(dataset, out, per_class, max_samples, seed, cache_dir, cache_limit, quiet):
    """Write one HTML page of a packed dataset: counts, fields, the class chart, image
    sizes, random samples of each class, every skipped input by reason, and possible
    problems (the same image under two classes, near-black or constant images, odd
    sizes, classes under 1%). Images are inlined: the page needs no server or network.

    \b
    Example:
      packer view ./images-wds -o view.html
      packer view ./export.h5 -o export.html --per-class 4
      packer view s3://bucket/images-wds -o view.html --max-samples 10000
    """
    from packer.view import write_view

    result = write_view(dataset, out, per_class=per_class, max_samples=max_samples or None,
                        seed=seed, progress=show_progress(quiet), cache_dir=cache_dir,
                        cache_limit=cache_limit)
    found = result["problems"]
    problems = ("; possible problems: " + ", ".join(f"{kind.lower()} {count:,}"
                                                     for kind, count in found.items())
                if found else "; no problems found")
    click.echo(f"wrote {result['output']} ({result['bytes'] / 1e6:,.1f} MB) from "
               f"{plural(result['read'], 'sample')} read of {result['count']:,}{problems}")
