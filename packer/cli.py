"""The `packer` command line: parses options, calls the library, prints results."""

import json
import re
import sys
from pathlib import Path

import click

from packer import __version__
from packer.checks import CHECK_MODES
from packer.cli_binary import inspect_binary
from packer.cli_tables import inspect_table, table_text
from packer.errors import PackerError, UsageProblem
from packer.formats import FORMAT_NAMES
from packer.pack_options import check_pack_options
from packer.parallel import tune_for_packing
from packer.report import (
    empty_classes,
    inspect_text,
    labels_text,
    pack_summary,
    pack_text,
    verify_text,
)

_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_size(text: str) -> int:
    """`256MB` -> 256000000, `1GiB` -> 1073741824, `5e8` -> 500000000."""
    match = re.fullmatch(r"\s*([0-9.eE+]+)\s*([A-Za-z]*)\s*", text)
    unit = match and match.group(2).upper()
    if not match or unit not in _UNITS:
        raise click.BadParameter(f"{text!r} is not a size; use e.g. 256MB, 1GB, 512MiB")
    return int(float(match.group(1)) * _UNITS[unit])


MIN_SHARD_SIZE = 10 << 10


class _Size(click.ParamType):
    name = "SIZE"

    def convert(self, value, param, ctx):
        return value if isinstance(value, int) else parse_size(value)


def _shard_size(ctx, param, value: int) -> int:
    if value < MIN_SHARD_SIZE:
        raise click.BadParameter(f"{value:,} bytes is too small; give at least 10KiB")
    return value


def _show_progress(quiet: bool) -> bool:
    """Progress bars only for a person watching a terminal."""
    return not quiet and sys.stderr.isatty()


class PackerGroup(click.Group):
    """Turns library errors into one-line messages: exit 2 for usage, 1 otherwise."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except UsageProblem as err:
            click.echo(f"Error: {err}", err=True)
            ctx.exit(2)
        except PackerError as err:
            click.echo(f"Error: {err}", err=True)
            ctx.exit(1)
        except KeyboardInterrupt:
            click.echo("\nInterrupted. A pack can be continued with --resume.", err=True)
            ctx.exit(130)


def _emit_json(data: dict) -> None:
    click.echo(json.dumps(data, indent=1, ensure_ascii=False))


json_option = click.option("--json", "as_json", is_flag=True,
                           help="Print machine-readable JSON instead of text.")
quiet_option = click.option("--quiet", "-q", is_flag=True,
                            help="No progress bar (none is drawn when stderr is not a terminal).")


@click.group(cls=PackerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="packer")
def cli():
    """Pack folders of small files into WebDataset shards, LMDB or HDF5.

    \b
    Example:
      packer pack ./images --to webdataset -o ./images-wds
      packer inspect ./images-wds
      packer verify ./images-wds --against ./images
      packer unpack ./images-wds -o ./restored
    """


@cli.command()
@click.argument("source", type=click.Path(path_type=Path))
@click.option("--to", "to", type=click.Choice(FORMAT_NAMES), default="webdataset",
              show_default=True, help="Output format.")
@click.option("-o", "--output", "out", type=click.Path(path_type=Path), required=True,
              help="Output folder (written as OUTPUT.partial, renamed when complete).")
@click.option("--labels", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="CSV of filename,label rows for a flat folder, paths relative to SOURCE; "
                   "string labels become ids. The first row is a header when its first cell "
                   "is filename, file, path, name or image, or when it names no file while a "
                   "later row does (and its label is no other row's). The encoding and the "
                   "delimiter (, ; tab |) are detected. For a binary dump: one label per "
                   "record.")
@click.option("--unlabelled", is_flag=True,
              help="Do not take classes from sub-folder names; keys keep the paths.")
@click.option("--group-by-stem", is_flag=True,
              help="Make every set of files sharing a stem one sample (image + mask pairs).")
@click.option("--follow-symlinks/--no-follow-symlinks", default=True, show_default=True,
              help="Follow symlinked files and folders (loops are detected and skipped).")
@click.option("--check", type=click.Choice(CHECK_MODES), default="header", show_default=True,
              help="header: signatures and end markers (cheap); decode: decode every "
                   "image; none: only empty files are skipped.")
@click.option("--on-error", type=click.Choice(["skip", "fail"]), default="skip",
              show_default=True,
              help="skip: list bad inputs in the manifest and go on; fail: stop at the first.")
@click.option("--workers", "-j", type=click.IntRange(min=1), default=1, show_default=True,
              help="Processes that read and check files; the output is the same for any N. "
                   "They pay off with --check decode (about 1.6-1.7x for 2 on 2 cores); with "
                   "the cheap default check reading files is the work, and on a small "
                   "machine one process is as fast.")
@click.option("--shard-size", type=_Size(), default="256MB", show_default=True,
              callback=_shard_size,
              help="webdataset, tfrecord: most bytes per shard or part, headers and the "
                   "tar end included (e.g. 64MB, 1GiB; at least 10KiB). Only a shard "
                   "holding one sample larger than this is bigger.")
@click.option("--max-count", type=click.IntRange(min=1),
              help="webdataset, tfrecord: most samples per shard or part.")
@click.option("--resume", is_flag=True,
              help="Continue an interrupted pack after its last complete shard.")
@click.option("--overwrite", is_flag=True, help="Replace an existing output.")
@click.option("--spec", metavar="SPEC",
              help="Binary input: a spec file (.toml) or a shipped spec (imu, pcm16, mnist-idx); "
                   "SOURCE is then a dump, or a folder of small binary files.")
@click.option("--window", type=click.IntRange(min=1),
              help="Binary dump: one sample per window of this many records (default: one "
                   "sample per record).")
@click.option("--stride", type=click.IntRange(min=1),
              help="Binary dump: records between window starts (default: the window).")
@click.option("--tail", type=click.Choice(["error", "drop"]),
              help="Binary: bytes after the last whole record: refuse them, or leave them out.")
@click.option("--label-field", metavar="FIELD",
              help="Binary dump: the record field whose values are the classes.")
@click.option("--label-spec", metavar="SPEC",
              help="Binary dump: --labels is a binary file read with this spec (e.g. "
                   "mnist-idx-labels); without it, --labels has one label per line.")
@click.option("--label-column", multiple=True, metavar="COL",
              help="Table: the label column (repeat, or a,b, for several: a multi-hot or "
                   "multi-target float vector). Text labels become class ids.")
@click.option("--feature-columns", multiple=True, metavar="COLS",
              help="Table: feature columns, names or globs ('f*'), repeatable or a,b "
                   "(default: every numeric column except the label and key).")
@click.option("--drop-columns", multiple=True, metavar="COLS",
              help="Table: columns (names or globs) to leave out of the features.")
@click.option("--key-column", metavar="COL",
              help="Table: the column whose values are the sample keys (default: the row "
                   "number, zero-padded).")
@click.option("--na", type=click.Choice(["fail", "drop", "zero", "mean"]), default="fail",
              show_default=True,
              help="Table: what to do with an empty or non-numeric feature cell: stop with "
                   "its row, drop its row, or fill it with 0 or the column's mean.")
@click.option("--categorical", multiple=True, metavar="COLS",
              help="Table: text columns to map to ids (sorted names, kept in the manifest).")
@click.option("--date-columns", multiple=True, metavar="COLS",
              help="Table: date columns, converted to seconds since the column's first "
                   "date (kept in the manifest; naive dates as UTC).")
@click.option("--task", type=click.Choice(["classify", "regress"]), default="classify",
              show_default=True,
              help="Table: class ids (cls) from the label, or a float target (target.npy).")
@click.option("--sheet", metavar="NAME", help="Excel: the sheet to pack (default: the first).")
@click.option("--header-row", type=click.IntRange(min=1), metavar="N",
              help="Table: the row (1-based, as a spreadsheet shows it) holding the column "
                   "names (default: guessed; title lines above it are skipped).")
@click.option("--skip-rows", type=click.IntRange(min=0), default=0, show_default=True,
              help="Table: rows to skip after the header (a units line, say).")
@click.option("--delimiter", metavar="CHAR",
              help="CSV: the field delimiter (default: detected among , tab ; |).")
@click.option("--decimal", type=click.Choice([".", ","]),
              help="CSV: the decimal mark (default: detected: a comma when numbers such as "
                   "1,5 appear and none such as 1.5), e.g. --decimal , which also reads "
                   "dots as thousands separators (1.234,5); --decimal . reads 1,234 as 1234.")
@click.option("--encoding", metavar="NAME",
              help="CSV and --labels files: the text encoding (default: detected; utf-8, "
                   "utf-8 with BOM, GBK ...), e.g. --encoding gbk.")
@json_option
@quiet_option
@click.pass_context
def pack(ctx, source, out, as_json, quiet, **options):
    """Pack SOURCE, a folder of files (or with --spec a binary dump, or a table: .csv,
    .tsv, .xlsx, .xls, .parquet), into one dataset.

    Classes come from sub-folder names (ImageFolder layout), from --labels, from a
    record field, from a table's --label-column, or there are none. Bad inputs are
    listed with their reason, never dropped silently. Files are stored byte for byte;
    binary records as arrays in their own type and native byte order; a table row as a
    float32 feature array (see docs/tables.md).

    \b
    Example:
      packer pack ./images --to webdataset -o ./images-wds --workers 2 --check decode
      packer pack ./flat --labels labels.csv --to lmdb -o ./flat.lmdb
      packer pack ./scans --group-by-stem --to hdf5 -o ./scans.h5
      packer pack imu.bin --spec imu.toml --to hdf5 -o imu.h5 --window 256 --stride 128
      packer pack ./wavs --spec pcm16 --to webdataset -o wavs-wds
      packer pack train-images-idx3-ubyte --spec mnist-idx --labels \\
          train-labels-idx1-ubyte --label-spec mnist-idx-labels --to hdf5 -o mnist.h5
      packer pack ./export.xlsx --to hdf5 --label-column diagnosis -o ./export.h5
      packer pack ./big.csv --to webdataset --label-column y --feature-columns 'f*' -o big-wds
      packer pack ./sensors.csv --to hdf5 --label-column y --na mean -o sensors.h5
      packer pack ./visits.csv --to hdf5 --label-column outcome --categorical city,sex \\
          --date-columns admitted -o visits.h5
      packer pack ./images --to webdataset -o ./images-wds --max-count 10000
      packer pack ./images --to webdataset -o ./images-wds --resume   # after an interruption
    """
    from packer.packing import PackOptions
    from packer.packing import pack as run_pack

    if out.exists() and not out.is_dir():
        raise UsageProblem(f"-o {out} is a file; choose a folder")
    check_pack_options(ctx, source, options)
    tune_for_packing()  # this process is packer's own (packer.pack leaves it as it is)
    manifest = run_pack(source, out, PackOptions(**options, progress=_show_progress(quiet)))
    if as_json:
        _emit_json(pack_summary(manifest, out))
    else:
        click.echo(pack_text(manifest, out))
        if manifest["source"].get("kind") == "table":
            click.echo(table_text(manifest))


@cli.command()
@click.argument("dataset", type=click.Path(path_type=Path))
@json_option
def inspect(dataset, as_json):
    """Show what a packed dataset holds: count, fields, classes, parts, skipped inputs.

    \b
    Example:
      packer inspect ./images-wds
      packer inspect ./images-wds --json | jq .classes
    """
    from packer.manifest import class_counts, load_manifest

    manifest = load_manifest(dataset)
    if as_json:
        _emit_json({"path": str(dataset), "format": manifest["format"],
                    "count": manifest["count"], "fields": manifest["fields"],
                    "classes": class_counts(manifest), "labels": labels_text(manifest),
                    "empty_classes": empty_classes(manifest), "parts": manifest["parts"],
                    "source": manifest["source"], "skipped": manifest["skipped"],
                    "ignored": manifest["ignored"], "records": manifest.get("records")})
    else:
        click.echo(inspect_text(manifest, dataset))


@cli.command()
@click.argument("dataset", type=click.Path(path_type=Path))
@click.option("--against", type=click.Path(path_type=Path),
              help="The source folder: also check that every packed file is bit-identical "
                   "to it and that every source file is packed or listed as skipped.")
@json_option
@quiet_option
def verify(dataset, against, as_json, quiet):
    """Check that every sample reads back and matches the manifest's checksums.

    Exits 1 when anything differs.

    \b
    Example:
      packer verify ./images-wds
      packer verify ./images.lmdb --against ./images --json
    """
    from packer.verify import verify as run_verify

    report = run_verify(dataset, against, progress=_show_progress(quiet))
    click.echo(json.dumps(report, indent=1, ensure_ascii=False) if as_json
               else verify_text(report))
    sys.exit(0 if report["ok"] else 1)


@cli.command()
@click.argument("dataset", type=click.Path(path_type=Path))
@click.option("-o", "--output", "out", type=click.Path(path_type=Path), required=True,
              help="Folder to write the files to.")
@click.option("--overwrite", is_flag=True,
              help="Replace a non-empty output folder written by an earlier `packer unpack`.")
@json_option
@quiet_option
def unpack(dataset, out, overwrite, as_json, quiet):
    """Write a packed dataset back to a folder with the original relative paths.

    Labels that no path carries (from --labels, a table's label column or a record
    field) go to a labels CSV of filename,label rows. The folder gets a
    .packer-unpack.json marker, so that --overwrite replaces only earlier unpacks.

    \b
    Example:
      packer unpack ./images-wds -o ./restored
    """
    from packer.unpack import unpack as run_unpack

    result = run_unpack(dataset, out, overwrite=overwrite, progress=_show_progress(quiet))
    if as_json:
        _emit_json(result)
    else:
        click.echo(f"unpacked {result['samples']:,} samples: {result['files']:,} files, "
                   f"{result['bytes'] / 1e6:,.1f} MB into {result['output']}")


def _worker_counts(ctx, param, value: str) -> list[int]:
    try:
        counts = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"{value!r}: give worker counts like 0,1,2,4") from None
    if not counts or min(counts) < 0:
        raise click.BadParameter(f"{value!r}: worker counts must be 0 or more")
    return counts


@cli.command()
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
              help="Also measure with each reader's files dropped from the page cache.")
@click.option("--decode/--no-decode", default=True, show_default=True,
              help="Decode images to tensors, or read bytes only (pure IO).")
@click.option("--image-size", type=click.IntRange(min=1), default=64, show_default=True,
              help="Decoded images are resized to this square size.")
@click.option("--json", "json_path", type=click.Path(path_type=Path),
              help="Write every figure to this JSON file.")
@click.option("--plot", "plot_path", type=click.Path(path_type=Path),
              help="Draw samples/s against workers to this PNG file.")
@quiet_option
def bench(paths, workers, batch_size, samples, repeat, cold, decode, image_size, json_path,
          plot_path, quiet):
    """Read the same samples loose and packed, and show which is faster, and how much.

    PATHS are a loose folder (read as people do by hand: one PIL open per file) and
    packed datasets of it. Prints samples/s, MB/s, time to the first batch and peak
    memory for each reader and worker count, the ceilings (cat of the files, decode
    on every core), and the num_workers to use.

    \b
    Example:
      packer bench ./images ./images-wds ./images.lmdb ./images.h5 --workers 0,1,2,4
      packer bench ./images ./images-wds --cold --json bench.json --plot bench.png
    """
    from packer.bench import BenchOptions, plot, table
    from packer.bench import bench as run_bench

    options = BenchOptions(workers, batch_size, samples, repeat, cold, decode, image_size)
    report = run_bench(list(paths), options,
                       progress=(lambda _: None) if quiet else (lambda m: click.echo(m, err=True)))
    click.echo(table(report))
    if json_path:
        json_path.write_text(json.dumps(report, indent=1))
    if plot_path:
        plot(report, plot_path)


cli.add_command(inspect_binary)
cli.add_command(inspect_table)


def main():
    cli(prog_name="packer")
