"""A trained run loaded back for evaluate, predict and export: its best weights, and the
input its model expects, read from the checkpoint (so it cannot drift from training)."""

from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import nn

import packer
from packer.errors import PackerError
from train import checkpoint, models
from train.config import TrainConfig
from train.data import DataInfo

FILES_FIELD = "jpg"  # where packer.LooseImages puts a file's pixels, whatever its format


@dataclass
class Trained:
    path: Path  # the checkpoint
    config: TrainConfig
    info: DataInfo
    model: nn.Module
    expected: dict  # the checkpoint's record of the input
    device: torch.device

    @property
    def image_size(self) -> tuple[int, int] | None:
        """(height, width) the loader resizes decoded images to (None: not images)."""
        return tuple(self.info.input_shape[1:]) if self.info.decoded_images else None


def load(run: str) -> Trained:
    """RUN: a folder train fit wrote (its best.pt) or a checkpoint file; on a GPU when
    there is one."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    path = Path(run) / "best.pt" if Path(run).is_dir() else Path(run)
    if not path.is_file():
        raise PackerError(f"{run}: no checkpoint there (a folder train fit wrote holds "
                          "best.pt; or give the .pt file itself)")
    state = checkpoint.load(path, device, ("model", "config"),
                            "give a folder train fit wrote, or its best.pt or last.pt")
    if "data" not in state:
        raise PackerError(f"{path}: written by an earlier train that did not record the "
                          "model's input (size, normalisation, classes); train the run again "
                          "to evaluate, predict or export it")
    expected, config = state["data"], TrainConfig.from_dict(state["config"])
    info = DataInfo(expected["kind"], expected["inputs"], expected["label"], expected["task"],
                    expected["classes"], None, tuple(expected["input_shape"]),
                    expected["stats"], targets=expected["targets"],
                    target_stats=expected["target_stats"], model_input=expected["model_input"])
    model = models.build(config.model, info.kind, info.input_shape, info.num_outputs,
                         config.dropout or 0.0, config.width, config.norm)
    if info.target_stats:
        models.scale_outputs(model, info.target_stats["mean"], info.target_stats["std"])
    model.load_state_dict(state["model"])
    return Trained(path, config, info, model.to(device).eval(), expected, device)


class ImageFiles(packer.LooseImages):
    """Image files decoded and resized as the loader does (the same function), with
    their class id (-1: none); an image that cannot be decoded is one message."""

    def __getitem__(self, index: int) -> dict:
        try:
            return super().__getitem__(index)
        except Exception as err:  # Pillow reports a bad image in many exception types
            raise PackerError(f"{self.files[index][0]}: not an image that can be decoded "
                              f"({type(err).__name__}: {err})") from None


def files_info(info: DataInfo) -> DataInfo:
    """`info` for batches of ImageFiles, whose images come under "jpg"."""
    return replace(info, inputs=[FILES_FIELD])


def outputs_of(trained: Trained, inputs: torch.Tensor) -> torch.Tensor:
    """The model's outputs as probabilities (classes), or values (regression)."""
    with torch.no_grad():
        outputs = trained.model(inputs.to(trained.device)).float().cpu()
    if trained.info.task == "classify":
        return outputs.softmax(dim=1)
    if trained.info.task == "multilabel":
        return outputs.sigmoid()
    return outputs
