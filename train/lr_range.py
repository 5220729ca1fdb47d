"""The learning-rate range test: the lr grows exponentially step by step (lr-find: from
1e-6 to 10, as fastai's and Smith's tests go; --lr auto: 1e-5 to 1) while the
smoothed training loss is recorded, until the loss diverges; the suggested rate is a
tenth of the one where the loss was lowest. `train lr-find` plots it; `--lr auto` runs a short one.

A sweep whose loss never falls clearly below where it began (by DESCENT) says nothing:
its lowest point is noise on a flat curve (on 135 images in batches of 8 it lay at
1.3e-4 and gave 1.3e-5, a rate at which nothing was learnt in 600 steps). The
suggestion is then the optimizer's usual rate, and the reason says so.

The smoothing (an exponential average over about five steps) lags the loss by a few
steps, so the lowest point comes a little late: a sweep of ten or more steps a
decade keeps that within a factor of about two, inside the factor of ten taken off."""

import math

from train import finetune
from train.run import any_rank
from train.step import NonFiniteLoss, set_seed, train_step, training_batch

LOW, HIGH = 1e-6, 10.0  # train lr-find: seven decades, past any rate that trains
AUTO_LOW, AUTO_HIGH, AUTO_STEPS = 1e-5, 1.0, 60  # --lr auto: twelve steps a decade
SMOOTHING = 0.8
DESCENT = 0.1  # how far below its start the lowest smoothed loss must lie to count
USUAL = {"sgd": 1e-2}  # an optimizer's usual rate where the test says nothing; else 1e-3


def sweep(run, batches, steps: int, low: float = LOW, high: float = HIGH) -> dict:
    """Train `run` for up to `steps` steps on `batches()` (a new iterable of (inputs,
    targets) on the device each call, read again while more steps are due); stops once
    the loss diverges. Returns the rates, the smoothed losses and the suggestion (never
    below the lowest rate tried)."""
    finetune.train_mode(run)
    generator = set_seed(run.config.seed)
    rates, losses, smooth = [], [], None
    for step, (inputs, targets) in zip(range(steps), _again(batches), strict=False):
        lr = low * (high / low) ** (step / max(steps - 1, 1))
        for group in run.optimizer.param_groups:
            group["lr"] = lr * group.get("lr_scale", 1.0)  # a backbone's share stays
        try:
            loss = train_step(run, *training_batch(run, inputs, targets, generator)).item()
        except NonFiniteLoss:
            break
        smooth = loss if smooth is None else SMOOTHING * smooth + (1 - SMOOTHING) * loss
        rates.append(lr)
        losses.append(smooth)
        if any_rank(smooth > 4 * min(losses)):
            break
    if not rates:
        rates, losses = [low], [math.inf]
    return {"lrs": rates, "losses": losses, **suggest(rates, losses, run.config.optimizer)}


def suggest(rates: list[float], losses: list[float], optimizer: str) -> dict:
    """The suggested rate, the rate of the lowest loss, and whether the sweep showed a
    fall of the loss at all (`descended`)."""
    best = min(range(len(losses)), key=losses.__getitem__)
    descended = math.isfinite(losses[0]) and losses[best] <= (1 - DESCENT) * losses[0]
    suggested = max(rates[best] / 10, rates[0]) if descended else USUAL.get(optimizer, 1e-3)
    return {"suggested_lr": suggested, "min_loss_lr": rates[best], "descended": descended,
            "optimizer": optimizer}


def _again(batches):
    while True:
        empty = True
        for batch in batches():
            empty = False
            yield batch
        if empty:
            return


def why(result: dict) -> str:
    test = f"a range test of {len(result['lrs'])} steps from {result['lrs'][0]:g} up"
    if not result["descended"]:
        return (f"{test} saw the loss fall by less than {DESCENT:.0%} (noise on a flat "
                f"curve), so {result['optimizer']}'s usual rate")
    return f"{test} (the loss was lowest at {result['min_loss_lr']:.3g}; a tenth of it)"
