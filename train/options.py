"""Every TrainConfig field as a click option of the `train` commands: its type and help
(one place, so that docs/cli.md, generated from --help, says each once), the groups of
them each command takes, and the decorator that adds them."""

from dataclasses import fields

import click

import packer
from train.config import (
    AMP_MODES,
    AUGMENTS,
    CACHES,
    DEVICES,
    LOSSES,
    NORMS,
    OPTIMIZERS,
    SCHEDULES,
    TASKS,
    TrainConfig,
)
from train.monitor import METRICS

_POSITIVE = click.FloatRange(min=0, min_open=True)
_FRACTION = click.FloatRange(0, 1, max_open=True)
AUTO = " Default: chosen from the data (printed at the start)."


class _AutoOr(click.ParamType):
    """`auto` (None: chosen from the data) or a value of `inner`."""

    def __init__(self, inner: click.ParamType, name: str):
        self.inner, self.name = inner, name

    def convert(self, value, param, ctx):
        if value is None or value == "auto":
            return None
        return self.inner.convert(value, param, ctx)


class _ImageSize(click.ParamType):
    """`auto`, a square's side (64) or WIDTHxHEIGHT (200x160), as (height, width)."""
    name = "auto|N|WxH"

    def convert(self, value, param, ctx):
        if value is None or value == "auto" or isinstance(value, int | tuple):
            return None if value == "auto" else value
        width, _, height = str(value).lower().partition("x")
        try:
            sides = [int(width), int(height or width)]
        except ValueError:
            self.fail(f"{value!r}: give auto, a side such as 64, or WIDTHxHEIGHT such as "
                      "200x160", param, ctx)
        if min(sides) < 8:
            self.fail(f"{value}: images of at least 8 px a side", param, ctx)
        return sides[0] if sides[0] == sides[1] else (sides[1], sides[0])


class _Size(click.ParamType):
    """A size above 0: `20GB`, `512MiB`, `5e9` (bytes)."""
    name = "SIZE"

    def convert(self, value, param, ctx):
        try:
            size = packer.size_bytes(value)
        except ValueError as err:
            self.fail(str(err), param, ctx)
        if size <= 0:
            self.fail(f"{value}: give a size above 0, e.g. 20GB", param, ctx)
        return size


_OPTIONS = {  # name: (type, help); booleans and choices take theirs from TrainConfig
    "val": (str, "A second packed dataset to validate on (else --val-split of DATA is held "
                 "out). Its classes must be training classes; ids are matched by name."),
    "val_split": (_AutoOr(_FRACTION, "auto|FRACTION"),
                  "Fraction of DATA held out for validation when there is no --val (0: "
                  "none), e.g. --val-split 0.2; for classification that share of each class "
                  "(stratified by --seed). Not used where DATA has a validation split made "
                  "when packed. auto: a tenth, raised toward 50 samples for small data (at "
                  "most 0.2); none where no class has two samples."),
    "folds": (click.IntRange(2, 20), "k-fold cross-validation: K runs, each validating on "
                                     "one fold of DATA (stratified by class) and training on "
                                     "the others, in OUT/fold-1 ... OUT/fold-K; prints each "
                                     "fold's best score, their mean and spread, and writes "
                                     "them to OUT/folds.json, e.g. --folds 5. For small data, "
                                     "where one held-out share is too few samples to judge."),
    "time_limit": (_AutoOr(click.FloatRange(min=0), "auto|MINUTES"),
                   "Minutes a run may take: it ends after the epoch that passes them, keeping "
                   "the best, e.g. --time-limit 30 (0: no limit). auto: 10 minutes under "
                   "1,000 training samples, else none."),
    "val_split_name": (str, "The split of DATA made when packed (packer pack --split) to "
                            "validate on, e.g. --val-split-name dev; the split named train "
                            "trains, and no other is read. Default: val, valid, validation or "
                            "dev, where DATA has one."),
    "task": (None, "classify, multilabel or regress; auto picks from the manifest."),
    "model": (str, "resnet (images), mlp (feature vectors), cnn1d (sensor windows); auto "
                   "picks. Or any timm model, e.g. timm:resnet18, or torchvision image "
                   "classifier, e.g. torchvision:mobilenet_v2 (randomly initialised unless "
                   "--pretrained or --weights)."),
    "num_classes": (click.IntRange(min=1), "Expected class count; a different count in the "
                                           "data is an error."),
    "width": (_AutoOr(click.IntRange(min=1), "auto|N"), "Channels of the built-in CNNs, "
              "hidden units of the MLP (auto: by the training set's size)." + AUTO),
    "norm": (None, "batch, group (GroupNorm: for small batches), or auto: group when the "
                   "batch per device is under 16."),
    "image_size": (_ImageSize(), "Images are resized to this size in the loader's workers: "
                   "a side (64) or WIDTHxHEIGHT (200x160); auto: their own size when they "
                   "share one, else near the median, never larger." + AUTO),
    "inputs": (str, "Array fields that make the model's input, comma-separated, e.g. "
                    "--inputs accel,gyro. Default: the image, else every float array and "
                    "every integer array but time stamps (names with 'time')."),
    "epochs": (_AutoOr(click.IntRange(min=1), "auto|N"), "Passes over the training data; "
               "auto: a budget of optimizer steps in whole epochs, e.g. --epochs 30." + AUTO),
    "batch_size": (_AutoOr(click.IntRange(min=1), "auto|N"), "Samples per step (per process "
                   "under torchrun); auto: no more than the data support." + AUTO),
    "workers": (click.IntRange(min=0), "DataLoader worker processes that read and decode."),
    "cache_dir": (click.Path(file_okay=False), "s3:// datasets: the folder their parts are "
                  "downloaded into and read from, shared by every process that names it, e.g. "
                  "--cache-dir /scratch/packer-cache (default: ~/.cache/packer)."),
    "cache_limit": (_Size(), "s3:// datasets: at most this much in --cache-dir, e.g. "
                    "--cache-limit 20GB (default: 20 GB, and at most 80% of the disk's free "
                    "space)."),
    "cache": (None, "ram: decode the training set once and keep it in memory (uint8 "
                    "images); off; auto: ram when it fits in a third of the available "
                    "memory."),
    "optimizer": (None, "adamw, adam, or sgd with Nesterov momentum, e.g. --optimizer sgd; "
                  "auto: sgd when fine-tuning a pretrained network (--pretrained or "
                  "--weights), else adamw."),
    "lr": (_AutoOr(_POSITIVE, "auto|LR"), "Base learning rate, e.g. --lr 1e-3; auto: a "
           "short range test on the training data picks it, as lr-find does."),
    "weight_decay": (_AutoOr(click.FloatRange(min=0), "auto|W"), "Weight decay (not applied "
                     "to biases and norm scales)." + AUTO),
    "momentum": (_FRACTION, "SGD momentum."),
    "schedule": (None, "cosine or step after a linear warm-up, plateau, or constant."),
    "warmup_epochs": (click.FloatRange(min=0), "Epochs of linear learning-rate warm-up."),
    "step_epochs": (click.IntRange(min=1), "step schedule: epochs between x0.1 drops."),
    "scale_lr": (None, "Scale the lr by batch size / --reference-batch (the linear scaling "
                       "rule)."),
    "reference_batch": (click.IntRange(min=1), "The batch size --lr was tuned for, for "
                                               "--scale-lr."),
    "clip_grad": (_POSITIVE, "Clip the gradient norm to this value."),
    "ema": (None, "Keep an exponential moving average of the weights, validated every "
                  "epoch beside them and saved as best_ema.pt (its best epoch), e.g. --ema "
                  "--ema-decay 0.998."),
    "ema_decay": (_FRACTION, "--ema: the weight of the old average at each step (0.999: "
                             "about the last 1,000 steps)."),
    "accumulate": (click.IntRange(min=1), "Gradient accumulation: one optimizer step on the "
                   "gradients of this many batches, e.g. --batch-size 8 --accumulate 4 steps "
                   "as a batch of 32 (BatchNorm still sees batches of 8)."),
    "device": (None, "cuda (an error when PyTorch sees no GPU), cpu, or auto: cuda when there "
                     "is one."),
    "amp": (None, "Mixed precision: bf16, fp16 (with a gradient scaler), off, or auto."),
    "channels_last": (None, "Channels-last memory format for image models: faster "
                      "convolutions (a MobileNetV2 at 112 px trains 1.3 to 1.7 times as fast on "
                      "2 CPU cores; on GPUs, the layout PyTorch recommends with mixed "
                      "precision); --no-channels-last keeps PyTorch's usual layout."),
    "dropout": (_AutoOr(_FRACTION, "auto|P"), "Dropout before the classifier head (and "
                "between the MLP's layers)." + AUTO),
    "label_smoothing": (_FRACTION, "Label smoothing for single-label classification."),
    "class_weights": (None, "auto: weight classes by inverse frequency, for imbalanced data."),
    "loss": (None, "focal (classification: --focal-gamma), or for regression mse or l1; "
                   "auto: cross-entropy or mse."),
    "focal_gamma": (click.FloatRange(min=0), "--loss focal: samples the model gets right "
                                             "count (1 - p)^gamma; 0 is cross-entropy."),
    "mixup": (click.FloatRange(min=0), "MixUp: mix each batch with itself, weights from "
                                       "Beta(ALPHA, ALPHA), e.g. --mixup 0.2 (0: off)."),
    "cutmix": (click.FloatRange(min=0), "CutMix (images): paste a box of another image of "
                                        "the batch, e.g. --cutmix 1.0 (0: off)."),
    "patience": (_AutoOr(click.IntRange(min=1), "auto|N"), "Stop after this many epochs "
                 "without a better validation score; the best epoch's weights are kept."
                 + AUTO),
    "augment": (None, "Image augmentation on the device: light (crops keeping 80% or more, "
                      "brightness/contrast +-10%; no flips), flip (light and flips), strong "
                      "(crops keeping 50%, flips, +-20%), randaugment or trivialaugment "
                      "(torchvision's policies, drawn per image), none; e.g. --augment "
                      "trivialaugment."),
    "log_every": (click.IntRange(min=0), "Also log every Nth optimizer step's loss and "
                                         "learning rate (warm-up included) to metrics.jsonl "
                                         "(records with a step) and TensorBoard, e.g. "
                                         "--log-every 50 (0: each epoch only)."),
    "random_erasing": (click.FloatRange(0, 1), "Images: blank a random box of each training "
                                               "image with this chance (CutOut), e.g. "
                                               "--random-erasing 0.25 (0: off)."),
    "seed": (click.IntRange(min=0), "Seed for the data order, augmentation and "
                                    "initialisation."),
    "weights": (str, "Start from a weights file and fine-tune: a checkpoint train wrote, a "
                     "state_dict saved with torch.save, or a .safetensors file, in timm's or "
                     "torchvision's names, e.g. --weights mobilenet_v2-b0353104.pth. Prints "
                     "what was loaded and skipped; a file for another architecture is refused."),
    "pretrained": (None, "Start a timm: or torchvision: model from its ImageNet weights, from "
                         "the library's own cache (downloaded there once), and fine-tune: "
                         "e.g. --model timm:resnet18 --pretrained. Offline, copy the cache "
                         "over or give --weights FILE."),
    "freeze_epochs": (_AutoOr(click.IntRange(min=0), "auto|N"), "Fine-tuning: train the new "
                      "head alone for this many epochs (backbone and its BatchNorm statistics "
                      "frozen), then the whole network, e.g. --freeze-epochs 3 (0: no frozen "
                      "phase)." + AUTO),
    "backbone_lr_scale": (_AutoOr(click.FloatRange(min=0), "auto|SHARE"), "Fine-tuning: "
                          "the backbone's learning rate as a share of the head's once "
                          "unfrozen, e.g. --backbone-lr-scale 0.03; auto: a hundredth, less "
                          "where that would step the backbone faster than 2e-4." + AUTO),
    "freeze_backbone": (None, "With --pretrained or --weights: train the head only, the whole "
                              "run (feature extraction)."),
    "freeze_stem": (None, "Fine-tuning: keep the stem frozen once the backbone unfreezes: "
                          "the layers that see the input at a quarter of its side or finer (a "
                          "CNN's first convolutions and first stage, generic edge and colour "
                          "filters, as detectron2 keeps them), the most costly to train at "
                          "their resolution; e.g. --no-freeze-stem trains them too."),
    "monitor": (None, "The validation metric that picks best.pt and ends the run early: "
                      "accuracy, macro-f1, balanced-accuracy, map (multi-label), loss or mae, "
                      "e.g. --monitor macro-f1; auto: the loss when under 100 samples "
                      "validate a classifier (their accuracy is too coarse to pick an epoch), "
                      "else macro-F1 when the classes are imbalanced (the largest 3x the "
                      "smallest), else accuracy; MAE for regression; mAP for multi-label."),
    "resume": (None, "Continue from OUT/last.pt exactly where it stopped."),
    "deterministic": (None, "Torch's deterministic algorithms (cuDNN's too), so that a GPU "
                            "run gives the same weights for the same --seed, e.g. train fit "
                            "./images-wds --deterministic. The data's batches and their "
                            "order are the same whatever --workers and --cache without it."),
}
_CHOICES = {"task": TASKS, "optimizer": OPTIMIZERS, "schedule": SCHEDULES, "amp": AMP_MODES,
            "device": DEVICES, "class_weights": ("auto",), "loss": LOSSES, "norm": NORMS,
            "cache": CACHES, "augment": AUGMENTS, "monitor": METRICS}
DATA = ("task", "model", "width", "norm", "num_classes", "image_size", "inputs", "batch_size",
        "workers", "cache_dir", "cache_limit", "device", "seed")
LOSS = ("label_smoothing", "class_weights", "loss", "focal_gamma")
AUGMENT = ("augment", "random_erasing", "mixup", "cutmix")
OPTIMIZER = ("optimizer", "lr", "momentum", "scale_lr", "reference_batch", "weights",
             "pretrained", "freeze_epochs", "backbone_lr_scale", "freeze_backbone",
             "freeze_stem")
FIT = ("val", "val_split", "val_split_name", "folds", "epochs", "weight_decay", "dropout",
       "schedule", "warmup_epochs", "step_epochs", "clip_grad", "accumulate", "ema",
       "ema_decay", "amp", "channels_last", "cache", "patience", "time_limit", "monitor",
       "deterministic", "log_every", "resume")


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
            default = "auto" if defaults[name] is None and isinstance(
                kind, _AutoOr | _ImageSize) else defaults[name]
            function = click.option(flag, type=kind, default=default,
                                    show_default=default is not None, help=text)(function)
        return function
    return decorate
