"""The learning-rate schedule as a pure function of the step, nanoGPT-style."""

import math

from train.config import TrainConfig


def lr_factor(step: int, steps_per_epoch: int, config: TrainConfig) -> float:
    """Multiplier of the base learning rate at optimizer step `step`: a linear warm-up,
    then cosine decay to zero, steps of x0.1 every `step_epochs`, or constant."""
    warmup = int(config.warmup_epochs * steps_per_epoch)
    if step < warmup:
        return (step + 1) / warmup
    if config.schedule == "cosine":
        total = max(config.epochs * steps_per_epoch - warmup, 1)
        return 0.5 * (1 + math.cos(math.pi * min(step - warmup, total) / total))
    if config.schedule == "step":
        return 0.1 ** (step // max(config.step_epochs * steps_per_epoch, 1))
    return 1.0
