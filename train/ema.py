"""--ema: an exponential moving average of the weights (torch's AveragedModel), updated
after every optimizer step, validated every epoch beside the raw weights and saved
beside them: in last.pt and best.pt under "ema" (for --resume), and as best_ema.pt, a
checkpoint of the average of its best epoch that `train evaluate`, `predict` and
`export` take like best.pt. BatchNorm's running statistics are averaged too."""

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn


def averaged(model: nn.Module, decay: float) -> AveragedModel:
    """The average of `model` (a copy of it now), each update weighing the old average
    by `decay`."""
    return AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(decay), use_buffers=True)


def update(run) -> None:
    """After an optimizer step: the average takes in the new weights."""
    if run.ema is not None:
        run.ema.update_parameters(run.model.module if run.world > 1 else run.model)


def state(run) -> dict | None:
    """What a checkpoint keeps of the average (None: no --ema)."""
    return run.ema.state_dict() if run.ema is not None else None


def restore(run, saved: dict | None) -> None:
    """--resume: the average as last.pt kept it (a run saved without --ema starts one
    from the weights restored)."""
    if run.ema is None:
        return
    if saved is None:
        run.ema = averaged(run.model.module if run.world > 1 else run.model,
                           run.config.ema_decay)
    else:
        run.ema.load_state_dict(saved)


def weights(run) -> dict[str, torch.Tensor]:
    """The averaged model's state_dict, as the raw model's is saved."""
    return run.ema.module.state_dict()
