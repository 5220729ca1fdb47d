"""The `train` command line: options in, the training library's results out."""

import json
from dataclasses import fields

import click

from packer.cli import PackerGroup
from train.config import AMP_MODES, DEVICES, OPTIMIZERS, SCHEDULES, TASKS, TrainConfig

_HELP = {
    "val": "A second packed dataset to validate on (else --val-split of DATA is held out).",
    "val_split": "Fraction of DATA held out for validation when there is no --val (0: none).",
    "task": "classify, multilabel or regress; auto picks from the manifest.",
    "model": "resnet (images), mlp (feature vectors), cnn1d (sensor windows); auto picks. "
             "Or any torchvision image classifier, e.g. torchvision:resnet18 (randomly "
             "initialised; needs torchvision installed).",
    "num_classes": "Expected class count; a different count in the data is an error.",
    "image_size": "Images are resized to this square size in the loader's workers.",
    "epochs": "Passes over the training data.",
    "batch_size": "Samples per step (per process under torchrun).",
    "workers": "DataLoader worker processes that read and decode.",
    "optimizer": "adamw (default), adam, or sgd with Nesterov momentum.",
    "lr": "Base learning rate.",
    "weight_decay": "Weight decay (not applied to biases and norm scales).",
    "momentum": "SGD momentum.",
    "schedule": "cosine or step after a linear warm-up, plateau, or constant.",
    "warmup_epochs": "Epochs of linear learning-rate warm-up.",
    "step_epochs": "step schedule: epochs between x0.1 drops.",
    "scale_lr": "Scale the lr by batch size / --reference-batch (the linear scaling rule).",
    "reference_batch": "The batch size --lr was tuned for, for --scale-lr.",
    "clip_grad": "Clip the gradient norm to this value.",
    "device": "cuda (an error when PyTorch sees no GPU), cpu, or auto: cuda when there is one.",
    "amp": "Mixed precision: bf16, fp16 (with a gradient scaler), off, or auto.",
    "channels_last": "Channels-last memory format for the image CNN (faster on GPUs).",
    "dropout": "Dropout before the classifier head.",
    "label_smoothing": "Label smoothing for single-label classification.",
    "class_weights": "auto: weight classes by inverse frequency, for imbalanced data.",
    "loss": "Regression loss: mse or l1 (auto: mse).",
    "patience": "Stop after this many epochs without a better validation score.",
    "augment": "Random resized crop, flip and colour jitter on the device (images).",
    "seed": "Seed for the data order, augmentation and initialisation.",
    "limit": "Train on the first N samples only.",
    "weights": "Start from this checkpoint's weights (fine-tuning).",
    "freeze_backbone": "With --weights: train the head only (feature extraction); for "
                       "torchvision models every layer but the last Linear is frozen.",
    "resume": "Continue from OUT/last.pt exactly where it stopped.",
}
_CHOICES = {"task": TASKS, "optimizer": OPTIMIZERS, "schedule": SCHEDULES, "amp": AMP_MODES,
            "device": DEVICES, "class_weights": ("auto",), "loss": ("auto", "mse", "l1")}


def config_options(function):
    """One click option per TrainConfig field (but data and out)."""
    for spec in reversed([f for f in fields(TrainConfig) if f.name not in ("data", "out")]):
        name = "--" + spec.name.replace("_", "-")
        if spec.type in (bool, "bool"):
            opposite = "--no-" + spec.name.replace("_", "-")
            option = click.option(f"{name}/{opposite}", default=spec.default, show_default=True,
                                  help=_HELP[spec.name])
        elif spec.name in _CHOICES:
            option = click.option(name, type=click.Choice(_CHOICES[spec.name]),
                                  default=spec.default, show_default=True, help=_HELP[spec.name])
        else:
            kind = {"int": int, "float": float}.get(str(spec.type).split(" ")[0], None)
            option = click.option(name, type=kind, default=spec.default, show_default=True,
                                  help=_HELP[spec.name])
        function = option(function)
    return function


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
@config_options
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
@config_options
def check(data, out, **options):
    """Check the data pipeline before training: shapes, ranges, labels, one step.

    Prints batch shapes and dtypes, the channel order, value ranges after
    normalisation, the class distribution (with an imbalance warning), a NaN/inf
    scan and one forward and backward pass, and writes a grid of samples with
    their labels to OUT/check_grid.png: the eye check that labels match samples.

    \b
    Example:
      train check ./images-wds
    """
    from train.probes import check as run_check

    report = run_check(TrainConfig(data=data, out=out, **options))
    for name, value in report.items():
        if name != "warnings":
            click.echo(f"{name}: {value}")
    for warning in report["warnings"]:
        click.echo(f"WARNING: {warning}")


@cli.command()
@click.argument("data")
@click.option("--samples", type=click.IntRange(min=1), default=128, show_default=True,
              help="How many samples to fit.")
@click.option("--out", default="runs/overfit", show_default=True, help="Unused folder name.")
@config_options
def overfit(data, samples, out, **options):
    """Fit a small subset until the loss is near zero: a model and data that cannot,
    have a bug. Exits 1 when the loss does not get there.

    \b
    Example:
      train overfit ./images-wds --samples 128
    """
    from train.probes import overfit as run_overfit

    options["lr"] = options["lr"] if options["lr"] != TrainConfig.lr else 1e-3
    result = run_overfit(TrainConfig(data=data, out=out, **options), samples)
    click.echo(result["message"])
    raise SystemExit(0 if result["reached"] else 1)


@cli.command("lr-find")
@click.argument("data")
@click.option("--out", default="runs/lr", show_default=True,
              help="Folder for lr_find.png and lr_find.json.")
@click.option("--steps", type=click.IntRange(min=10), default=100, show_default=True,
              help="Steps of the sweep from 1e-6 to 1.")
@config_options
def lr_find(data, out, steps, **options):
    """Sweep the learning rate up exponentially, plot loss against it, suggest one.

    \b
    Example:
      train lr-find ./images-wds --out runs/lr
    """
    from train.probes import lr_find as run_lr_find

    result = run_lr_find(TrainConfig(data=data, out=out, **options), steps)
    click.echo(f"suggested learning rate: {result['suggested_lr']:.3g} (the loss was lowest "
               f"at {result['min_loss_lr']:.3g}); plot in {out}/lr_find.png")


def main():
    cli(prog_name="train")
