"""The `train` command line: options in, the training library's results out."""

import json
from pathlib import Path

import click

import packer
from packer.cli.group import PackerGroup
from packer.errors import PackerError
from train.config import TrainConfig
from train.metrics import strict_json
from train.mixing import from_command_line
from train.options import AUGMENT, DATA, FIT, LOSS, OPTIMIZER, config_options


@click.group(cls=PackerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(packer.__version__, prog_name="train")
def cli():
    """Train a model straight from a packed dataset (packer's output).

    \b
    Example:
      train fit ./images-wds --epochs 30 --out runs/exp1
      torchrun --nproc-per-node 2 -m train fit ./images-wds --out runs/ddp
    """


@cli.command()
@click.argument("data", nargs=-1, required=True)
@click.option("--out", default="runs/exp", show_default=True,
              help="Folder for checkpoints, metrics.jsonl, summary.json, TensorBoard logs.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the run's figures as one JSON line at the end (best_epoch, "
                   "epochs_run, stopped_early, samples_per_s, data_wait_share); summary.json "
                   "in --out holds everything.")
@click.option("--mix-weights", default=None, metavar="P,P,...",
              help="With several DATA: their proportions in each epoch, one a dataset, e.g. "
                   "--mix-weights 0.7,0.3 (default: in proportion to their sizes, each sample "
                   "once an epoch).")
@config_options(*DATA, *LOSS, *OPTIMIZER, *AUGMENT, *FIT)
def fit(data, out, as_json, mix_weights, **options):
    """Fit a model to DATA, validating every epoch and keeping the best checkpoint.
    Several DATA are mixed: each epoch draws from them in the proportions --mix-weights
    gives, classes matched by name, and --val-split holds out that fraction of each.

    \b
    Example:
      train fit ./images-wds --val-split 0.1 --epochs 30 --out runs/exp1
      train fit ./photos-wds ./scans.lmdb --mix-weights 0.7,0.3 --out runs/mix
      train fit ./export.h5 --task regress --out runs/reg
      train fit s3://bucket/images-wds --cache-dir /scratch/c --cache-limit 20GB
      tensorboard --logdir runs
    """
    from train.folds import cross_validate
    from train.loop import fit as run_fit

    options.update(from_command_line(data, mix_weights))
    if options["folds"]:
        result = cross_validate(TrainConfig(out=out, **options))
        if as_json:
            click.echo(json.dumps({k: result[k] for k in ("folds", "monitor", "scores", "mean",
                                                           "std")}))
        return
    summary = run_fit(TrainConfig(out=out, **options))
    if as_json:
        click.echo(json.dumps({k: summary[k] for k in ("best_epoch", "epochs_run",
                                                         "stopped_early", "samples_per_s",
                                                         "data_wait_share")}))


@cli.command()
@click.argument("data")
@click.option("--out", default="runs/check", show_default=True,
              help="Folder for check_grid.png, check_augmented.png and "
                   "check_policies.png.")
@config_options(*DATA, *LOSS, *AUGMENT)
def check(data, out, **options):
    """Check the data pipeline before training: shapes, ranges, labels, one step.

    Prints batch shapes and dtypes, the channel order, value ranges after
    normalisation, the class distribution (with an imbalance warning) and one
    forward and backward pass, and writes a grid of samples with their labels to
    OUT/check_grid.png: the eye check that labels match samples; beside it
    OUT/check_augmented.png, the same samples as the model sees them (after
    --augment, normalisation, MixUp/CutMix); and for images OUT/check_policies.png,
    a few of them under each --augment policy, a row each. Exits 1 when any
    sample's float inputs or label hold NaN or infinite values, naming them.

    \b
    Example:
      train check ./images-wds
    """
    from train.probes import check as run_check

    report = run_check(TrainConfig(data=data, out=out, val_split=0.0, **options))
    for name, value in report.items():
        if name not in ("warnings", "error"):
            click.echo(f"{name}: {value}")
    for warning in report["warnings"]:
        click.echo(f"WARNING: {warning}")
    if report["error"]:
        raise PackerError(report["error"])


@cli.command()
@click.argument("data")
@click.option("--samples", type=click.IntRange(min=1), default=128, show_default=True,
              help="How many samples to fit.")
@config_options(*DATA, *LOSS, *OPTIMIZER)
def overfit(data, samples, **options):
    """Fit a small subset until the loss is near zero: a model and data that cannot,
    have a bug. Exits 1 when the loss does not get there.

    \b
    Example:
      train overfit ./images-wds --samples 128
    """
    from train.probes import overfit as run_overfit

    result = run_overfit(TrainConfig(data=data, val_split=0.0, **options), samples)
    click.echo(result["message"])
    raise SystemExit(0 if result["reached"] else 1)


@cli.command("lr-find")
@click.argument("data")
@click.option("--out", default="runs/lr", show_default=True,
              help="Folder for lr_find.png and lr_find.json.")
@click.option("--steps", type=click.IntRange(min=10), default=100, show_default=True,
              help="Steps of the sweep from 1e-6 to 10 (it ends early once the loss "
                   "diverges), e.g. --steps 200.")
@config_options(*DATA, *LOSS, *OPTIMIZER, *AUGMENT, "weight_decay", "dropout")
def lr_find(data, out, steps, **options):
    """Sweep the learning rate up exponentially, plot loss against it, suggest one.

    \b
    Example:
      train lr-find ./images-wds --out runs/lr
    """
    from train.lr_range import why
    from train.probes import lr_find as run_lr_find

    result = run_lr_find(TrainConfig(data=data, out=out, val_split=0.0, **options), steps)
    click.echo(f"suggested learning rate: {result['suggested_lr']:.3g}: {why(result)}; plot in "
               f"{out}/lr_find.png")


@cli.command("evaluate")
@click.argument("run")
@click.argument("data")
@click.option("--out", default=None, help="Folder for evaluation.json, per_class.csv, "
              "confusion.csv and confusion.png, e.g. --out runs/exp1/eval-test (default: "
              "RUN/evaluate).")
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True,
              help="Samples a forward pass, e.g. --batch-size 256.")
@click.option("--workers", type=click.IntRange(min=0), default=2, show_default=True,
              help="DataLoader worker processes that read and decode, e.g. --workers 4.")
@click.option("--split", metavar="NAME",
              help="Only DATA's split of this name, made when it was packed (packer pack "
                   "--split, or its test/ folder), e.g. --split test.")
@click.option("--json", "as_json", is_flag=True, help="Print the metrics as JSON.")
def evaluate_command(run, data, out, batch_size, workers, split, as_json):
    """Score a trained RUN (its best.pt) on DATA: a packed dataset or a folder of class
    sub-folders. Prints accuracy, per-class precision, recall and F1 and the confusion
    matrix (regression: MAE and RMSE) and writes them as JSON, CSV and a PNG.

    \b
    Example:
      train evaluate runs/exp1 ./test-wds
      train evaluate runs/exp1 ./images-wds --split test
      train evaluate runs/exp1 ./photos/test --out runs/exp1/eval-photos
    """
    from train.evaluate import evaluate, summary
    from train.trained import load

    trained = load(run)
    folder = Path(out) if out else trained.path.parent / "evaluate"
    result = evaluate(trained, data, folder, batch_size, workers, split)
    if as_json:
        click.echo(json.dumps(strict_json(result)))
        return
    click.echo(summary(result, trained.info.classes))
    click.echo(f"written to {folder}")


@cli.command("predict")
@click.argument("run")
@click.argument("inputs", nargs=-1, required=True)
@click.option("-o", "--out", default="predictions.csv", show_default=True,
              help="The CSV to write: one row per input, e.g. -o runs/exp1/predictions.csv.")
@click.option("--top-k", type=click.IntRange(min=1), default=5, show_default=True,
              help="Classes a row, most probable first, e.g. --top-k 3.")
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True,
              help="Samples a forward pass, e.g. --batch-size 256.")
@click.option("--workers", type=click.IntRange(min=0), default=2, show_default=True,
              help="DataLoader worker processes that read and decode, e.g. --workers 4.")
def predict_command(run, inputs, out, top_k, batch_size, workers):
    """Predict with a trained RUN (its best.pt) on INPUTS: a packed dataset, folders of
    images (searched through) or image files. Each input is prepared as in training
    (size, normalisation: read from the checkpoint).

    \b
    Example:
      train predict runs/exp1 ./new-photos -o predictions.csv
      train predict runs/exp1 a.jpg b.png --top-k 3
    """
    from train.predict import predict
    from train.trained import load

    rows = predict(load(run), list(inputs), Path(out), top_k, batch_size, workers)
    click.echo(f"{rows:,} predictions written to {out}")


@cli.command("export")
@click.argument("run")
@click.option("--format", "fmt", type=click.Choice(["onnx", "torchscript"]), default="onnx",
              show_default=True, help="onnx (onnxruntime, TensorRT, ...) or torchscript "
              "(torch.jit.load), e.g. --format torchscript.")
@click.option("-o", "--out", default=None, help="The model file to write, e.g. -o "
              "model.onnx (default: model.onnx or model.torchscript.pt beside RUN's best.pt); "
              "its preprocessing goes beside it as NAME.preprocess.json.")
def export_command(run, fmt, out):
    """Export a trained RUN's best weights to run without this toolkit, with the
    preprocessing its input needs (size, mean, std, classes) beside them as JSON.

    \b
    Example:
      train export runs/exp1 --format onnx
      train export runs/exp1 --format torchscript -o deploy/model.pt
    """
    from train.export import default_path, export
    from train.trained import load

    trained = load(run)
    model, recipe = export(trained, fmt, Path(out) if out else default_path(trained, fmt))
    click.echo(f"{fmt} model written to {model}, its preprocessing to {recipe}")


@cli.command("report")
@click.argument("run")
@click.option("-o", "--out", default=None, help="The page to write, e.g. -o report.html "
              "(default: RUN/report.html).")
@click.option("--mistakes", "shown", type=click.IntRange(min=0), default=48, show_default=True,
              help="Wrong validation samples shown, most confident first, e.g. --mistakes 96.")
@click.option("--workers", type=click.IntRange(min=0), default=2, show_default=True,
              help="DataLoader worker processes that read the validation data, e.g. "
              "--workers 4.")
def report_command(run, out, shown, workers):
    """One self-contained HTML page of a finished RUN, opened offline by double-click:
    the recipe that was chosen and why, the loss, metric and learning-rate curves with
    the best epoch marked, per-class precision, recall and F1 and the confusion matrix,
    the validation samples the best weights get wrong (true class, predicted class and
    its probability, most confident first) and each epoch's share of time spent
    waiting for data. train fit writes it into every run folder at its end.

    \b
    Example:
      train report runs/exp1
      train report runs/exp1 -o ~/exp1.html --mistakes 96
    """
    from train.report import write

    page = write(run, Path(out) if out else None, shown, workers)
    click.echo(f"report written to {page}")


def main():
    cli(prog_name="train")
