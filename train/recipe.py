"""Defaults from the data: every option left at auto is chosen here, with its reason.

    image size    the images' own size when the sampled ones share it, else the median
                  short side (a square); never an upscale; at most 256 px a side
    batch size    at most 64 (images, sequences) or 256 (feature vectors), and small
                  enough that an epoch has 16 or more steps (at least 8 samples)
    model width   CNN channels 16 under 10,000 training images, else 32; MLP hidden
                  units 64 under 2,000 rows, 256 under 200,000, else 512
    dropout, wd   tables: dropout 0.2 / 0.1 / 0 and weight decay 0.1 / 0.05 / 0.01 by
                  the same row counts; others: no dropout, weight decay 0.05
    epochs        a budget of optimizer steps (images 600, sequences 1,500, feature
                  vectors 2,000) in whole epochs, at least 10 and at most 100
    patience      a quarter of the epochs, at least 5: then stop, keeping the best
    time limit    10 minutes under 1,000 training samples (else none): then stop after
                  the epoch, keeping the best
    val split     (train.sides) a tenth held out, raised toward 50 samples for small
                  data, at most 0.2
    norm          GroupNorm when the batch per device is under 16, else BatchNorm
    cache         decoded training set in RAM when it fits in a third of the memory

The learning rate (`--lr auto`) comes from a short range test (`train.lr_range`).
"""

import math
import statistics
from dataclasses import dataclass

from packer.errors import PackerError
from train import cache
from train.config import TrainConfig
from train.data import DataInfo, image_shape, image_sizes
from train.sides import SMALL_DATA

MAX_SIDE = 256
BATCH_CAP = {"image": 64, "sequence": 64, "vector": 256}
MIN_STEPS_PER_EPOCH, MIN_BATCH = 16, 8
STEP_BUDGET = {"image": 600, "sequence": 1500, "vector": 2000}
MIN_EPOCHS, MAX_EPOCHS = 10, 100
SMALL_IMAGE_SET = 10_000
TABLE_ROWS = (2_000, 200_000)  # the row counts where an MLP grows
GROUP_NORM_BELOW = 16
IMBALANCE = 5.0  # largest / smallest class count that earns a warning
SMALL_DATA_MINUTES = 10  # the time limit of a run on small data


@dataclass
class Choice:
    name: str  # the TrainConfig field
    value: object
    why: str

    def line(self) -> str:
        shown = "x".join(map(str, self.value[::-1])) if isinstance(self.value, list | tuple) \
            else self.value
        return f"  {self.name.replace('_', ' ')} {shown}: {self.why}"


def refuse_inapplicable(config: TrainConfig, info: DataInfo) -> None:
    """Options that this data would make do nothing are refused, with why: MixUp and
    CutMix need class targets, CutMix an image; a loss or class weights of another task;
    a scaled learning rate where the range test chooses it."""
    task = info.task
    if config.loss == "focal" and task != "classify":
        raise PackerError(f"--loss focal weighs the classes of a classification; this is a "
                          f"{_task_name(task)} task (leave out --loss, or --loss l1 or mse "
                          "for a regression)")
    if config.loss in ("l1", "mse") and task != "regress":
        raise PackerError(f"--loss {config.loss} is a regression loss; this is a "
                          f"{_task_name(task)} task (leave out --loss, or --loss focal)")
    if config.class_weights and task != "classify":
        raise PackerError(f"--class-weights weighs the classes of a classification; this is "
                          f"a {_task_name(task)} task (leave it out)")
    if config.scale_lr and config.lr is None:
        raise PackerError("--scale-lr scales the learning rate you give with --lr by the "
                          "batch size; without --lr the range test chooses the rate for this "
                          "batch size already (give --lr, or leave out --scale-lr)")
    if (config.mixup or config.cutmix) and info.task == "regress":
        raise PackerError("--mixup and --cutmix mix class targets; this is a regression "
                          "task (leave them at 0)")
    if config.random_erasing and info.kind != "image":
        raise PackerError(f"--random-erasing blanks a box of an image; these samples hold "
                          f"{info.kind} data")
    if config.cutmix and info.kind != "image":
        raise PackerError(f"--cutmix pastes a box of an image into another; these samples "
                          f"hold {info.kind} data (--mixup mixes any input)")


def _task_name(task: str) -> str:
    return {"regress": "regression", "multilabel": "multi-label",
            "classify": "classification"}.get(task, task)


def choose_image_size(config: TrainConfig, info: DataInfo) -> list[Choice]:
    """Decoded images: set config.image_size and info.input_shape when left to auto."""
    if not info.decoded_images or config.image_size is not None:
        return []
    sizes = image_sizes(info, config)
    side, why = image_size(sizes, square=info.files is not None)
    config.image_size = side
    info.input_shape = image_shape(side)
    return [Choice("image_size", side, why)]


def image_size(sizes: list[tuple[int, int]], square: bool = False):
    """(the size, why) from sampled (width, height) pairs: an int side or (height, width)."""
    shared = len(set(sizes)) == 1
    width, height = sizes[0]
    if shared and max(width, height) <= MAX_SIDE and not (square and width != height):
        size = width if width == height else (height, width)
        return size, f"the images' own size (all {len(sizes):,} sampled share it)"
    if shared and max(width, height) > MAX_SIDE:
        scale = MAX_SIDE / max(width, height)
        size = (round(height * scale), round(width * scale))
        return (size[0] if size[0] == size[1] else size,
                f"the images' size ({width}x{height}, all {len(sizes):,} sampled) scaled "
                f"down to {MAX_SIDE} px on the long side")
    side = min(int(statistics.median(min(w, h) for w, h in sizes)), MAX_SIDE)
    side = max(side - side % 8, 8) if side >= 16 else side
    return side, (f"sizes differ ({len(set(sizes)):,} sizes among {len(sizes):,} sampled): "
                  f"a square near the median short side, at most {MAX_SIDE} px")


def choose(config: TrainConfig, info: DataInfo, samples: int, world: int) -> list[Choice]:
    """Fill every auto field of `config` but the lr, for `samples` training samples over
    `world` processes; returns what was chosen and why."""
    per_rank = max(math.ceil(samples / world), 1)
    picks = [_batch_size(config, info, per_rank)] if config.batch_size is None else []
    if config.batch_size is None:
        config.batch_size = picks[0].value
    picks += _capacity(config, info, samples)
    picks += _length(config, info, per_rank)
    if config.norm == "auto" and ":" not in config.model:  # timm's and torchvision's own
        norm = "group" if config.batch_size < GROUP_NORM_BELOW else "batch"
        picks.append(Choice("norm", norm, f"{'GroupNorm' if norm == 'group' else 'BatchNorm'}"
                            f" for a batch of {config.batch_size} per device (GroupNorm "
                            f"under {GROUP_NORM_BELOW})"))
    for pick in picks:
        setattr(config, pick.name, pick.value)
    use, why = cache.decide(config.cache, per_rank, _sample_bytes(info))
    config.cache = "ram" if use else "off"
    return [*picks, Choice("cache", config.cache, why)]


def _batch_size(config: TrainConfig, info: DataInfo, samples: int) -> Choice:
    cap = BATCH_CAP[info.kind]
    fit = 2 ** int(math.log2(max(samples // MIN_STEPS_PER_EPOCH, 1)))
    size = max(min(cap, fit), MIN_BATCH)
    why = (f"{MIN_STEPS_PER_EPOCH} or more steps an epoch of {samples:,} samples"
           if size < cap else f"the most for {info.kind} data")
    return Choice("batch_size", size, why)


def _capacity(config: TrainConfig, info: DataInfo, samples: int) -> list[Choice]:
    """Model width, dropout and weight decay for the data's kind and size."""
    picks = []
    if info.kind == "vector":
        tier = sum(samples >= rows for rows in TABLE_ROWS)
        width, dropout, decay = ((64, 0.2, 0.1), (256, 0.1, 0.05), (512, 0.0, 0.01))[tier]
        why = f"for {samples:,} training rows"
    else:
        width = (16 if samples < SMALL_IMAGE_SET else 32) if info.kind == "image" else 64
        dropout, decay = 0.0, 0.05
        why = f"for {samples:,} training samples"
    if config.width is None and config.model in ("auto", "resnet", "mlp", "cnn1d"):
        unit = "hidden units" if info.kind == "vector" else "channels"
        picks.append(Choice("width", width, f"{unit} {why}"))
    if config.dropout is None:
        picks.append(Choice("dropout", dropout, why))
    if config.weight_decay is None:
        picks.append(Choice("weight_decay", decay, why))
    return picks


def _length(config: TrainConfig, info: DataInfo, samples: int) -> list[Choice]:
    steps = math.ceil(samples / config.batch_size)
    picks = []
    if config.epochs is None:
        budget = STEP_BUDGET[info.kind]
        epochs = min(max(math.ceil(budget / steps), MIN_EPOCHS), MAX_EPOCHS)
        picks.append(Choice("epochs", epochs, f"a budget of {budget:,} optimizer steps at "
                            f"{steps:,} an epoch ({MIN_EPOCHS} to {MAX_EPOCHS} epochs)"))
        config.epochs = epochs
    validated = config.val is not None or config.val_split != 0 or \
        bool(info.sides and info.sides.val_split)
    if config.patience is None and validated:
        patience = max(5, config.epochs // 4)
        picks.append(Choice("patience", patience, "stop after this many epochs without a "
                            "better validation score (a quarter of the epochs, at least 5)"))
    if config.time_limit is None:
        small = samples < SMALL_DATA
        config.time_limit = SMALL_DATA_MINUTES if small else 0
        if small:
            picks.append(Choice("time_limit", SMALL_DATA_MINUTES, "minutes at most, for "
                                f"small data ({samples:,} training samples, under "
                                f"{SMALL_DATA:,}): the run ends after the epoch that passes "
                                "them, keeping the best (--time-limit 0: none)"))
    return picks


def _sample_bytes(info: DataInfo) -> int:
    """Bytes one decoded training sample takes: uint8 pixels, else 4 bytes a value."""
    values = math.prod(info.input_shape) + info.targets
    return values if info.decoded_images else 4 * values


def report(choices: list[Choice]) -> str:
    """The lines printed at the start of a run."""
    return "\n".join(["defaults from the data (an option given replaces its line):",
                      *(c.line() for c in choices)])


def imbalance_warning(info: DataInfo, config: TrainConfig) -> str | None:
    """The warning `check` and `fit` give (once) when the largest class has IMBALANCE
    times the smallest's samples and nothing weighs the classes (None: no warning)."""
    if not (info.task == "classify" and info.class_counts) or config.class_weights \
            or config.loss == "focal":
        return None
    low, high = min(info.class_counts), max(info.class_counts)
    if low and high / low <= IMBALANCE:
        return None
    return (f"classes are imbalanced ({high:,} against {low:,} samples): consider "
            "--class-weights auto")
