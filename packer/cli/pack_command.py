"""`packer pack`: the options of a pack in, the library's pack, its summary out."""

import click
from click.core import ParameterSource

from packer.cli.options import (
    Location,
    PartOption,
    Size,
    emit_json,
    json_option,
    quiet_option,
    shard_size,
    show_progress,
)
from packer.cli.report import pack_summary, pack_text
from packer.formats import DEFAULT_FORMAT, FORMAT_NAMES
from packer.packing.options import PackOptions, pack_options
from packer.packing.parallel import ENGINES, tune_for_packing
from packer.packing.transform import RESIZE_MODES
from packer.sources import option_groups, recorded_kind
from packer.sources.binary import shipped_spec_names
from packer.sources.files.checks import CHECK_MODES


def source_options(command):
    """Each source kind's options (packer/sources/*/options.py), in the registry's order."""
    for group in reversed(option_groups()):
        command = group()(command)
    return command


def pack_command() -> click.Command:
    """`packer pack`: the shared options, then the options of each source kind registered
    now (packer/sources/*/options.py)."""
    command = _pack
    for decorate in reversed(_DECORATORS):
        command = decorate(command)
    return click.command("pack")(command)


# The parameters of `pack` as --help lists them: SOURCE, the options every pack shares
# (or some formats read), then each source kind's.
_DECORATORS = [
    click.argument("source", type=Location()),
    click.option("--to", "to", type=click.Choice(FORMAT_NAMES), default=DEFAULT_FORMAT,
                 show_default=True, help="Output format."),
    click.option("-o", "--output", "out", type=Location(),
                 help="The output (or --append DATASET): a folder, or one file for hdf5 "
                      "(written as OUTPUT.partial, renamed when complete), e.g. -o images.h5; "
                      "or s3://BUCKET/PREFIX (parts uploaded as they are done, the manifest "
                      "last; endpoint and credentials "
                      "from the AWS environment, e.g. AWS_ENDPOINT_URL)."),
    click.option("--check", type=click.Choice(CHECK_MODES), default="header", show_default=True,
                 help="header: signatures and end markers (cheap); decode: decode every "
                      "image; none: only empty files are skipped."),
    click.option("--on-error", type=click.Choice(["skip", "fail"]), default="skip",
                 show_default=True,
                 help="skip: list bad inputs in the manifest and go on; fail: stop at the first."),
    click.option("--workers", "-j", type=click.IntRange(min=1), default=1, show_default=True,
                 help="Processes that read and check files; the output is the same for any N. "
                      "They pay off with --check decode (about 1.6-1.7x for 2 on 2 cores); with "
                      "the cheap default check reading files is the work, and on a small "
                      "machine one process is as fast."),
    click.option("--engine", type=click.Choice(ENGINES), default="local", show_default=True,
                 help="Where samples are read and encoded: local worker processes (--workers), "
                      "or tasks on a Ray cluster (pip install 'packer[ray]'; the input at the "
                      "same path on every node, or in object storage: s3://...). This "
                      "process writes the parts, so the output is byte for byte the same with "
                      "either, and --resume takes either. "
                      "E.g. --engine ray --address auto."),
    click.option("--address", metavar="ADDRESS",
                 help="--engine ray: the cluster, as ray.init takes it: auto (this node's "
                      "cluster), HOST:PORT, or ray://HOST:10001 (default: a new local instance "
                      "on this machine's CPUs)."),
    click.option("--shard-size", cls=PartOption, type=Size(), default="256MB", show_default=True,
                 callback=shard_size,
                 help="{formats}: most bytes per shard or part file, as written (a tar "
                      "shard's headers and end included; e.g. 64MB, 1GiB; at least 10KiB). "
                      "Only one holding a single larger sample is bigger."),
    click.option("--max-count", cls=PartOption, type=click.IntRange(min=1),
                 help="{formats}: most samples per shard or part file, e.g. --max-count 10000."),
    click.option("--resume", is_flag=True,
                 help="Continue an interrupted pack after its last complete shard."),
    click.option("--overwrite", is_flag=True, help="Replace an existing output."),
    click.option("--append", "append_to", type=Location(), metavar="DATASET",
                 help="Instead of -o: add SOURCE's samples to the packed DATASET (any format) "
                      "as new parts, its parts untouched; classes merge by name, the manifest "
                      "records the append; --resume finishes an interrupted one, e.g. packer "
                      "pack ./more --append ./images-wds."),
    click.option("--on-duplicate", type=click.Choice(["error", "skip"]), default="error",
                 show_default=True,
                 help="--append: a key already in the dataset stops the append (error), or is "
                      "left out and listed as skipped (skip)."),
    click.option("--spec", metavar="SPEC",
                 help="Binary input: a spec file (.toml) or a shipped spec ("
                      f"{', '.join(shipped_spec_names())}); SOURCE is then a "
                      "dump, or a folder of small binary files (gzip, bz2, xz read as their "
                      "contents), e.g. --spec wav."),
    click.option("--resize", metavar="SIZE",
                 help="Folder of images: store every image at the training resolution: N (the "
                      "shorter side, e.g. --resize 64), WxH (exactly, e.g. --resize 64x64; see "
                      "--resize-mode) or max:N (the longer side at most N). Images are "
                      "re-encoded (--encode); verify --against and unpack say so."),
    click.option("--resize-mode", type=click.Choice(RESIZE_MODES), default="crop",
                 show_default=True,
                 help="With --resize WxH: crop (scale to cover, centre crop), pad (scale to "
                      "fit, black borders) or stretch, e.g. --resize 64x64 --resize-mode pad."),
    click.option("--encode", default="keep", show_default=True, metavar="ENCODER",
                 help="Folder of images: how images are stored: keep (as they are; with "
                      "--resize, in their own format), jpeg[:QUALITY] (default 90), png, webp, "
                      "or raw (uint8 pixels in the field rgb.npy: nothing to decode when "
                      "reading), e.g. --resize 64x64 --encode raw."),
    click.option("--split", metavar="NAME=SHARE,...",
                 help="Split the samples at pack time, recorded in the manifest (sample "
                      "indices per split), e.g. --split train=0.8,val=0.1,test=0.1: stratified "
                      "by class when there are classes, seeded by --split-seed. A folder whose "
                      "top holds train/, val/ (or valid/, validation/, dev/) and test/ is split by "
                      "them without --split, classes from the folders below. Identical content in "
                      "two splits is reported (the manifest's splits.leaks)."),
    click.option("--split-by", metavar="folder:N",
                 help="With --split: keep each group in one split, the group of a file being "
                      "the first N folders of its path, e.g. --split-by folder:1 for "
                      "PATIENT/scan.png (groups whole, not stratified)."),
    click.option("--split-seed", type=int, default=0, show_default=True,
                 help="The seed of --split's draw: the same seed, input and shares give the "
                      "same splits, e.g. --split-seed 7."),
    click.option("--dedupe", is_flag=True,
                 help="Store each exact duplicate (the same bytes in every field but .json and "
                      ".txt notes) once: the first read is kept (of split folders, the training "
                      "copy), the others listed as skipped with the file they repeat; before "
                      "--split, so no content lies in two splits."),
    source_options,
    json_option,
    quiet_option,
    click.pass_context,
]


def _pack(ctx, source, out, append_to, on_duplicate, as_json, quiet, **options):
    """Pack SOURCE, a folder of files (or with --spec a binary dump, or a table: .csv,
    .tsv, .xlsx, .xls, .parquet), into one dataset. SOURCE may be a folder of files in
    object storage, s3://BUCKET/PREFIX: its objects are listed once and read by the
    workers (or Ray tasks) themselves, with the layout, labels and checks of a local
    folder, and packed to the same bytes; endpoint and credentials from the AWS
    environment (e.g. AWS_ENDPOINT_URL). A table or (with --spec) a dump at an s3:// URL
    is copied to the cache, checked, and packed as the local file.

    Classes come from sub-folder names (ImageFolder layout), from --labels, from a
    record field, from a table's --label-column, or there are none. Bad inputs are
    listed with their reason, never dropped silently. Files are stored byte for byte;
    with --resize or --encode, images are stored re-encoded at the training
    resolution; binary records as arrays in their own type and native byte order; a table row as a
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
      packer pack ./images --to webdataset --resize 64 -o ./images64-wds
      packer pack ./images --to lmdb --resize 64x64 --encode raw -o ./images64.lmdb
      packer pack ./images --to webdataset -o ./images-wds --split train=0.8,val=0.1,test=0.1
      packer pack ./scans --to lmdb -o ./scans.lmdb --split train=0.8,val=0.2 --split-by folder:1
      packer pack ./images --to webdataset -o ./images-wds --resume   # after an interruption
      packer pack ./images --to webdataset -o ./images-wds --engine ray --address auto
      packer pack ./images --to webdataset -o s3://bucket/images-wds  # parts uploaded as done
      packer pack s3://bucket/raw/images --to webdataset -o ./images-wds --workers 4
      packer pack s3://bucket/export.xlsx --to hdf5 --label-column diagnosis -o export.h5
    """
    from packer.packing import pack as run_pack

    defaults = (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)
    given = {name for name in options if ctx.get_parameter_source(name) not in defaults}
    chosen, warning = pack_options(source, options, given, progress=show_progress(quiet))
    if warning:
        click.echo(warning, err=True)
    tune_for_packing()  # this process is packer's own (packer.pack leaves it as it is)
    if (out is None) == (append_to is None):
        raise click.UsageError("give -o OUTPUT (a new dataset) or --append DATASET (one to "
                               "add to), one of them")
    if append_to is None and on_duplicate != "error":
        raise click.UsageError("--on-duplicate is for --append DATASET: a new pack has no "
                               "keys to meet again. Leave it out, or pass --append")
    if append_to is not None:
        return _append(source, append_to, chosen, on_duplicate, given, as_json)
    manifest = run_pack(source, out, chosen)
    if as_json:
        emit_json(pack_summary(manifest, out))
    else:
        click.echo(pack_text(manifest, out))
        kind = recorded_kind(manifest)
        summary = kind and kind.summary_text(manifest)
        if summary:
            click.echo(summary)



pack = pack_command()

def _append(source, dataset, options: PackOptions, on_duplicate: str, given: set,
            as_json: bool) -> None:
    from packer.packing.append import append_local, append_text

    if given & {"to", "shard_size", "max_count", "overwrite"}:
        raise click.UsageError("--append keeps the dataset's format and part bounds: leave "
                               "out --to, --shard-size, --max-count and --overwrite")
    manifest = append_local(source, dataset, options, on_duplicate)
    if as_json:
        emit_json({**pack_summary(manifest, dataset), "appended": manifest["appended"]})
    else:
        click.echo(append_text(manifest))
