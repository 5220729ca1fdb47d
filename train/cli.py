"""The `train` command line: options in, the training library's results out."""

import json
from dataclasses import fields

import click

from packer import PackerGroup
from packer.errors import PackerError
from train.config import AMP_MODES, DEVICES, OPTIMIZERS, SCHEDULES, TASKS, TrainConfig

_POSITIVE = click.FloatRange(min=0, min_open=True)
_FRACTION = click.FloatRange(0, 1, max_open=True)
_OPTIONS = {  # name: (type, help); booleans and choices take theirs from TrainConfig
    "val": (str, "A second packed dataset to validate on (else --val-split of DATA is held "
                 "out). Its classes must be training classes; ids are matched by name."),
    "val_split": (_FRACTION, "Fraction of DATA held out for validation when there is no --val "
                             "(0: none)."),
    "task": (None, "classify, multilabel or regress; auto picks from the manifest."),
    "model": (str, "resnet (images), mlp (feature vectors), cnn1d (sensor windows); auto "
                   "picks. Or any torchvision image classifier, e.g. torchvision:resnet18 "
                   "(randomly initialised; needs torchvision installed)."),
    "num_classes": (click.IntRange(min=1), "Expected class count; a different count in the "
                                           "data is an error."),
    "image_size": (click.IntRange(min=8), "Images are resized to this square size in the "
                                          "loader's workers."),
    "inputs": (str, "Array fields that make the model's input, comma-separated, e.g. "
                    "--inputs accel,gyro. Default: the image, else every float array and "
                    "every integer array but time stamps (names with 'time')."),
    "epochs": (click.IntRange(min=1), "Passes over the training data."),
    "batch_size": (click.IntRange(min=1), "Samples per step (per process under torchrun)."),
    "workers": (click.IntRange(min=0), "DataLoader worker processes that read and decode."),
    "optimizer": (None, "adamw (default), adam, or sgd with Nesterov momentum."),
    "lr": (_POSITIVE, "Base learning rate."),
    "weight_decay": (click.FloatRange(min=0), "Weight decay (not applied to biases and norm "
                                              "scales)."),
    "momentum": (_FRACTION, "SGD momentum."),
    "schedule": (None, "cosine or step after a linear warm-up, plateau, or constant."),
    "warmup_epochs": (click.FloatRange(min=0), "Epochs of linear learning-rate warm-up."),
    "step_epochs": (click.IntRange(min=1), "step schedule: epochs between x0.1 drops."),
    "scale_lr": (None, "Scale the lr by batch size / --reference-batch (the linear scaling "
                       "rule)."),
    "reference_batch": (click.IntRange(min=1), "The batch size --lr was tuned for, for "
                                               "--scale-lr."),
    "clip_grad": (_POSITIVE, "Clip the gradient norm to this value."),
    "device": (None, "cuda (an error when PyTorch sees no GPU), cpu, or auto: cuda when there "
                     "is one."),
    "amp": (None, "Mixed precision: bf16, fp16 (with a gradient scaler), off, or auto."),
    "channels_last": (None, "Channels-last memory format for the image CNN (faster on GPUs)."),
    "dropout": (_FRACTION, "Dropout before the classifier head."),
    "label_smoothing": (_FRACTION, "Label smoothing for single-label classification."),
    "class_weights": (None, "auto: weight classes by inverse frequency, for imbalanced data."),
    "loss": (None, "Regression loss: mse or l1 (auto: mse)."),
    "patience": (click.IntRange(min=1), "Stop after this many epochs without a better "
                                        "validation score."),
    "augment": (None, "Random resized crop, flip and colour jitter on the device (images)."),
    "seed": (click.IntRange(min=0), "Seed for the data order, augmentation and "
                                    "initialisation."),
    "weights": (str, "Start from this checkpoint's weights (fine-tuning)."),
    "freeze_backbone": (None, "With --weights: train the head only (feature extraction); for "
                              "torchvision models every layer but the last Linear is frozen."),
    "resume": (None, "Continue from OUT/last.pt exactly where it stopped."),
}
_CHOICES = {"task": TASKS, "optimizer": OPTIMIZERS, "schedule": SCHEDULES, "amp": AMP_MODES,
            "device": DEVICES, "class_weights": ("auto",), "loss": ("auto", "mse", "l1")}
DATA = ("task", "model", "num_classes", "image_size", "inputs", "batch_size", "workers",
        "device", "seed")
LOSS = ("label_smoothing", "class_weights", "loss")
OPTIMIZER = ("optimizer", "lr", "momentum", "scale_lr", "reference_batch", "weights",
             "freeze_backbone")
FIT = ("val", "val_split", "epochs", "weight_decay", "dropout", "schedule", "warmup_epochs",
       "step_epochs", "clip_grad", "amp", "channels_last", "augment", "patience", "resume")


def config_options(*names: str):
    """One click option per named TrainConfig field."""
    defaults = {f.name: f.default for f in fields(TrainConfig)}

    def decorate(function):
        for name in reversed(names):
            kind, text = _OPTIONS[name]
            flag = "--" + name.replace("_", "-")
            if isinstance(defaults[name], bool):
                flag, kind = f"{flag}/--no-{flag[2:]}", None
            elif name in _CHOICES:
                kind = click.Choice(_CHOICES[name])
            function = click.option(flag, type=kind, default=defaults[name],
                                    show_default=True, help=text)(function)
        return function
    return decorate


@click.group(cls=PackerGroup, context_settings={"help_option_names": ["-h", "--help"]})
def cli():
    """Train a model straight from a packed dataset (packer's output).

    \b
    Example:
      train fit ./images-wds --epochs 30 --out runs/exp1
      torchrun --nproc-per-node 2 -m train fit ./images-wds --out runs/ddp
    """


@cli.command()
@click.argument("data")
@click.option("--out", default="runs/exp", show_default=True,
              help="Folder for checkpoints, metrics.jsonl, summary.json, TensorBoard logs.")
@config_options(*DATA, *LOSS, *OPTIMIZER, *FIT)
def fit(data, out, **options):
    """Fit a model to DATA, validating every epoch and keeping the best checkpoint.

    \b
    Example:
      train fit ./images-wds --val-split 0.1 --epochs 30 --out runs/exp1
      train fit ./export.h5 --task regress --out runs/reg
      tensorboard --logdir runs
    """
    from train.loop import fit as run_fit

    summary = run_fit(TrainConfig(data=data, out=out, **options))
    click.echo(json.dumps({k: summary[k] for k in ("best_epoch", "epochs_run",
                                                     "samples_per_s", "data_wait_share")}))


@cli.command()
@click.argument("data")
@click.option("--out", default="runs/check", show_default=True,
              help="Folder for check_grid.png.")
@config_options(*DATA, *LOSS)
def check(data, out, **options):
    """Check the data pipeline before training: shapes, ranges, labels, one step.

    Prints batch shapes and dtypes, the channel order, value ranges after
    normalisation, the class distribution (with an imbalance warning) and one
    forward and backward pass, and writes a grid of samples with their labels to
    OUT/check_grid.png: the eye check that labels match samples. Exits 1 when any
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

    options["lr"] = options["lr"] if options["lr"] != TrainConfig.lr else 1e-3
    result = run_overfit(TrainConfig(data=data, val_split=0.0, **options), samples)
    click.echo(result["message"])
    raise SystemExit(0 if result["reached"] else 1)


@cli.command("lr-find")
@click.argument("data")
@click.option("--out", default="runs/lr", show_default=True,
              help="Folder for lr_find.png and lr_find.json.")
@click.option("--steps", type=click.IntRange(min=10), default=100, show_default=True,
              help="Steps of the sweep from 1e-6 to 1.")
@config_options(*DATA, *LOSS, *OPTIMIZER, "weight_decay", "dropout")
def lr_find(data, out, steps, **options):
    """Sweep the learning rate up exponentially, plot loss against it, suggest one.

    \b
    Example:
      train lr-find ./images-wds --out runs/lr
    """
    from train.probes import lr_find as run_lr_find

    result = run_lr_find(TrainConfig(data=data, out=out, val_split=0.0, **options), steps)
    click.echo(f"suggested learning rate: {result['suggested_lr']:.3g} (the loss was lowest "
               f"at {result['min_loss_lr']:.3g}); plot in {out}/lr_find.png")


def main():
    cli(prog_name="train")
