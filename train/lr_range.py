"""The learning-rate range test: the lr grows exponentially step by step while the
smoothed training loss is recorded; the suggested rate is a tenth of the one where
the loss was lowest. `train lr-find` plots it; `--lr auto` runs a short one."""

import math

import torch
import torch.distributed as dist

from train.step import NonFiniteLoss, set_seed, train_step, training_batch

LOW, HIGH = 1e-6, 1.0
AUTO_STEPS = 60  # --lr auto: ten steps a decade


def sweep(run, batches, steps: int, low: float = LOW, high: float = HIGH) -> dict:
    """Train `run` for up to `steps` steps on `batches()` (a new iterable of (inputs,
    targets) on the device each call, read again while more steps are due); stops once
    the loss diverges. Returns the rates, the smoothed losses and the suggestion (never
    below the lowest rate tried)."""
    run.model.train()
    generator = set_seed(run.config.seed)
    rates, losses, smooth = [], [], None
    for step, (inputs, targets) in zip(range(steps), _again(batches), strict=False):
        lr = low * (high / low) ** (step / max(steps - 1, 1))
        for group in run.optimizer.param_groups:
            group["lr"] = lr
        try:
            loss = train_step(run, *training_batch(run, inputs, targets, generator)).item()
        except NonFiniteLoss:
            break
        smooth = loss if smooth is None else 0.9 * smooth + 0.1 * loss
        rates.append(lr)
        losses.append(smooth)
        if smooth > 4 * min(losses):
            break
    if not rates:
        rates, losses = [low], [math.inf]
    best = min(range(len(losses)), key=losses.__getitem__)
    return {"lrs": rates, "losses": losses, "suggested_lr": max(rates[best] / 10, rates[0]),
            "min_loss_lr": rates[best]}


def _again(batches):
    while True:
        empty = True
        for batch in batches():
            empty = False
            yield batch
        if empty:
            return


def shared(value: float, device: torch.device) -> float:
    """Rank 0's value on every rank (each rank's sweep saw its own batches)."""
    if not (dist.is_available() and dist.is_initialized()):
        return value
    number = torch.tensor([value], dtype=torch.float64, device=device)
    dist.broadcast(number, src=0)
    return number.item()


def why(result: dict) -> str:
    return (f"a range test of {len(result['lrs'])} steps from {LOW:g} up (the loss was "
            f"lowest at {result['min_loss_lr']:.3g}; a tenth of it)")
