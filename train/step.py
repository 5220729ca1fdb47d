"""The one training step (`fit`, `overfit` and `lr-find` all take it) and the one seed."""

import contextlib
import random

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from train import ema
from train.augment import augment_images, mix
from train.inputs import IMAGE_MEAN, IMAGE_STD


class NonFiniteLoss(ArithmeticError):
    """The training loss became NaN or infinite (on some rank): no step was taken."""


def seed_number(seed: int, epoch: int | None = None) -> int:
    return seed if epoch is None else seed * 100_003 + epoch


def set_seed(seed: int, epoch: int | None = None) -> torch.Generator:
    """Seed torch (initialisation, dropout), numpy and random for `seed` and, within a
    run, `epoch` (so that a resumed epoch draws what it drew the first time); returns a
    CPU generator of the same number for augmentation and data order."""
    number = seed_number(seed, epoch)
    torch.manual_seed(number)
    np.random.seed(number % 2 ** 32)
    random.seed(number)
    return torch.Generator().manual_seed(number)


def normalisation(info) -> tuple[list, list]:
    """The (mean, std) per channel that made the model's input images from [0, 1]."""
    stats = info.model_input or info.stats or {"mean": [IMAGE_MEAN], "std": [IMAGE_STD]}
    return tuple(value if isinstance(value, list) else [value]
                 for value in (stats["mean"], stats["std"]))


def training_batch(run, inputs: torch.Tensor, targets: torch.Tensor,
                   generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch as training sees it: augmented images, then MixUp/CutMix (whose
    targets are class probabilities)."""
    config, info = run.config, run.info
    if info.kind == "image":
        inputs = augment_images(inputs, generator, config.augment, normalisation(info),
                                config.random_erasing)
    if config.mixup or config.cutmix:
        if info.task == "classify":
            targets = F.one_hot(targets, info.num_outputs).float()
        inputs, targets = mix(inputs, targets, config.mixup, config.cutmix, generator)
    return inputs, targets


def forward_loss(run, inputs: torch.Tensor, targets: torch.Tensor, model=None):
    """(outputs, loss) of `model` (default: the run's) under the run's mixed precision;
    outputs and loss in float32."""
    with torch.autocast(run.device.type, dtype=run.amp_dtype or torch.float32,
                        enabled=run.amp_dtype is not None):
        outputs = (run.model if model is None else model)(inputs).float()
    if run.info.task == "regress":
        outputs = outputs.squeeze(1)
    return outputs, run.loss_fn(outputs, targets)


def train_step(run, inputs: torch.Tensor, targets: torch.Tensor, micro: int = 0,
               accumulate: int = 1) -> torch.Tensor:
    """Forward and backward (through the gradient scaler for fp16); the last of
    `accumulate` micro-batches (`micro` counts from 0) then clips and takes one optimizer
    and one scheduler step on the gradients of all of them, each loss divided by
    `accumulate` (so 4 batches of 8 step as one of 32). A batch shorter than the batch
    size (a stream's last) weighs each of its samples as a full batch does: its loss
    times its share of the batch, not a whole step for one sample. Returns the loss. Raises
    NonFiniteLoss, before any update, when the loss is NaN or infinite on any rank."""
    _, loss = forward_loss(run, inputs, targets)
    if not _finite(run, loss):
        raise NonFiniteLoss(loss.item())
    if micro == 0:
        run.optimizer.zero_grad(set_to_none=True)
    last = micro == accumulate - 1
    # Under DDP the gradients are averaged across ranks once, at the group's last batch
    with run.model.no_sync() if run.world > 1 and not last else contextlib.nullcontext():
        scaled = loss * (len(targets) / run.config.batch_size) / accumulate
        (run.scaler.scale(scaled) if run.scaler else scaled).backward()
    if last:
        optimizer_step(run)
    return loss.detach()


def optimizer_step(run) -> None:
    """Clip the gradients, then one optimizer step and one scheduler step."""
    config, optimizer = run.config, run.optimizer
    if run.scaler:
        run.scaler.unscale_(optimizer)
    if config.clip_grad:
        nn.utils.clip_grad_norm_(run.model.parameters(), config.clip_grad)
    if run.scaler:
        run.scaler.step(optimizer)
        run.scaler.update()
    else:
        optimizer.step()
    if not isinstance(run.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
        run.scheduler.step()
    ema.update(run)


def _finite(run, loss: torch.Tensor) -> bool:
    """Whether the loss is finite on every rank (so that all ranks stop together)."""
    finite = torch.isfinite(loss.detach()).float()
    if run.world > 1:
        dist.all_reduce(finite, op=dist.ReduceOp.MIN)
    return bool(finite.item())
