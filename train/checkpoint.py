"""Checkpoints: written atomically, loaded with weights_only=True."""

import os
from pathlib import Path

import torch


def save(path: Path, state: dict) -> None:
    """Write to a temporary name, then rename: a crash never leaves half a checkpoint."""
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def load(path: Path, device: torch.device) -> dict:
    return torch.load(path, map_location=device, weights_only=True)
