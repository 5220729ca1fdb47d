"""`packer inspect`, `packer verify`, `packer unpack`: a packed dataset in, text or
JSON out."""

import json
import sys
from pathlib import Path

import click

from packer.cli.options import (
    Location,
    cache_options,
    emit_json,
    json_option,
    quiet_option,
    show_progress,
)
from packer.cli.report import dataset_text, shards_text, verify_text
from packer.text import plural


@click.command()
@click.argument("dataset", type=Location())
@cache_options
@json_option
def inspect(dataset, cache_dir, cache_limit, as_json):
    """Show what a packed dataset holds: count, fields, classes, parts, skipped inputs.

    DATASET may also be WebDataset shards that other tools wrote (a folder of .tar or
    .tar.gz files, one shard, or a glob or brace pattern; in object storage, a prefix
    of .tar objects, one, or a brace pattern): their samples and fields.

    \b
    Example:
      packer inspect ./images-wds
      packer inspect ./images-wds --json | jq .classes
      packer inspect './downloaded/shard-{000000..000009}.tar'
      packer inspect s3://bucket/images-wds   # AWS_ENDPOINT_URL etc. from the environment
      packer inspect 's3://bucket/shards/shard-{000000..000009}.tar' --cache-dir /scratch/c
    """
    from packer.datasets.info import manifest_info
    from packer.read.dataset import manifest_or_shards

    manifest, shards = manifest_or_shards(dataset, cache_dir, cache_limit)
    if manifest is None:
        if as_json:
            emit_json(shards)
        else:
            click.echo(shards_text(shards))
    elif as_json:
        emit_json(manifest_info(manifest, dataset))
    else:
        click.echo(dataset_text(manifest, dataset))


@click.command()
@click.argument("dataset", type=Location())
@click.option("--against", type=click.Path(path_type=Path), multiple=True,
              help="What the dataset was packed from (repeat for a dataset appended to: "
                   "every source that went in, each sample checked against the one that "
                   "holds its file): a folder (every packed file "
                   "bit-identical, every file packed or listed as skipped), or a table or "
                   "dump file (every sample equal to the row or record it came from), e.g. "
                   "--against ./images or --against export.csv.")
@cache_options
@json_option
@quiet_option
def verify(dataset, against, cache_dir, cache_limit, as_json, quiet):
    """Check that every sample reads back and matches the manifest's checksums.

    Exits 1 when anything differs.

    \b
    Example:
      packer verify ./images-wds
      packer verify ./images.lmdb --against ./images --json
      packer verify ./export.h5 --against ./export.csv
      packer verify ./images-wds --against ./images --against ./more   # after --append
      packer verify s3://bucket/images-wds   # parts downloaded through the cache
      packer verify s3://bucket/images-wds --cache-dir /scratch/c --cache-limit 5GB
    """
    from packer.datasets.verify import verify as run_verify

    against = (None if not against else against[0] if len(against) == 1 else list(against))
    report = run_verify(dataset, against, progress=show_progress(quiet), cache_dir=cache_dir,
                        cache_limit=cache_limit)
    click.echo(json.dumps(report, indent=1, ensure_ascii=False) if as_json
               else verify_text(report))
    sys.exit(0 if report["ok"] else 1)


@click.command()
@click.argument("dataset", type=Location())
@click.option("-o", "--output", "out", type=click.Path(path_type=Path), required=True,
              help="Folder to write the files to.")
@click.option("--overwrite", is_flag=True,
              help="Replace a non-empty output folder written by an earlier `packer unpack`.")
@click.option("--no-splits", "no_splits", is_flag=True,
              help="Write a split dataset's samples together, each under its own path, "
                   "not in a folder per split (train/cat/0.jpg comes back as cat/0.jpg), "
                   "e.g. to split the folder again with `packer pack --split`.")
@cache_options
@json_option
@quiet_option
def unpack(dataset, out, overwrite, no_splits, cache_dir, cache_limit, as_json, quiet):
    """Write a packed dataset back to a folder with the original relative paths.

    A dataset split when packed (--split, or its source's train/ val/ test/ folders)
    comes back with a folder per split, OUTPUT/<split>/<class>/<file>, the layout that
    `packer pack OUTPUT` reads back into the same splits; --no-splits leaves them out.
    Labels that no path carries (from --labels, a table's label column or a record
    field) go to a labels CSV of filename,label rows. The folder gets a
    .packer-unpack.json marker, so that --overwrite replaces only earlier unpacks.
    DATASET may also be plain WebDataset shards (a folder of .tar files, or in object
    storage a prefix of them, or a brace pattern): each member becomes a file named as
    in the tar.

    \b
    Example:
      packer unpack ./images-wds -o ./restored
      packer unpack s3://bucket/images-wds -o ./restored --cache-dir /scratch/c
      packer unpack 's3://bucket/shards/shard-{000000..000003}.tar' -o ./members
      packer unpack ./split-wds -o ./flat --no-splits
    """
    from packer.datasets.unpack import unpack as run_unpack

    result = run_unpack(dataset, out, overwrite=overwrite, splits=not no_splits,
                        progress=show_progress(quiet), cache_dir=cache_dir,
                        cache_limit=cache_limit)
    if as_json:
        emit_json(result)
    else:
        click.echo(f"unpacked {plural(result['samples'], 'sample')}: "
                   f"{plural(result['files'], 'file')}, "
                   f"{result['bytes'] / 1e6:,.1f} MB into {result['output']}")
        if result["splits"]:
            click.echo("splits: " + ", ".join(f"{name}/ {count:,}" for name, count
                                              in result["splits"].items())
                       + " (a folder each, as `packer pack` reads them back)")
        if result["splits_note"]:
            click.echo(f"note: {result['splits_note']}")
        if result["reencoded"]:
            click.echo(f"note: {result['reencoded']}; they are written as stored, with the "
                       "extension of their stored field")
