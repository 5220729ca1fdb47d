"""Checkpoints: written atomically, loaded with weights_only=True."""

import os
from pathlib import Path

import torch

from packer.errors import PackerError

# What `train fit --resume` reads back from last.pt
RESUME_KEYS = ("model", "optimizer", "scheduler", "scaler", "epoch", "best", "best_epoch",
               "stale", "config", "history")


def save(path: Path, state: dict) -> None:
    """Write to a temporary name, then rename: a crash never leaves half a checkpoint."""
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def load(path: Path, device: torch.device, needs: tuple[str, ...] = (),
         instead: str = "") -> dict:
    """The checkpoint at `path`, holding at least the keys `needs`; a damaged or foreign
    file is one PackerError naming it (`instead`: what the user can do then)."""
    try:
        state = torch.load(path, map_location=device, weights_only=True)
    except Exception as err:  # torch reports a damaged file in many exception types
        reason = f"it cannot be read ({type(err).__name__}: {_first_line(err)})"
    else:
        missing = [key for key in needs if not isinstance(state, dict) or key not in state]
        if not missing:
            return state
        reason = f"it holds no {', '.join(missing)}: it is not a checkpoint `train fit` wrote"
    raise PackerError(f"{path}: {reason}; the file is damaged or not a checkpoint"
                      f"{'; ' + instead if instead else ''}")


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else "no detail"
