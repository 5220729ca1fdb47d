"""The validation samples a trained run gets wrong, most confident first (classification),
or furthest off (regression): what `train report` shows as the run's mistakes."""

import heapq
import io
from dataclasses import dataclass, replace

import torch
from PIL import Image
from tqdm import tqdm

import packer
from train.datasets import datasets
from train.inputs import to_inputs, to_targets
from train.trained import Trained, outputs_of

SHOWN = 48  # mistakes kept for the page
TOP = 3  # classes listed with their probabilities for each mistake


@dataclass
class Mistake:
    key: str
    truth: str  # the class name, or the target value(s) as text
    predicted: str
    score: float  # the predicted class's probability, or the absolute error
    top: list[tuple[str, float]]  # classification: the TOP classes and probabilities
    png: bytes | None  # the image as the model saw it (resized, before normalisation)


def mistakes(trained: Trained, limit: int = SHOWN, workers: int = 0) -> tuple[list, int]:
    """The `limit` worst validation samples, and how many validation samples were read
    ([] and 0 when the run held none out or its task is multi-label)."""
    info = trained.info
    config = replace(trained.config, image_size=trained.image_size)
    _, val = datasets(info, config)
    if val is None or info.task == "multilabel":
        return [], 0
    loader = packer.DataLoader(val, batch_size=64, num_workers=workers)
    worst, seen = [], 0
    with torch.no_grad():
        for batch in tqdm(loader, desc="mistakes", leave=False, disable=None):
            outputs = outputs_of(trained, to_inputs(batch, info, trained.device)).cpu()
            targets = to_targets(batch, info, torch.device("cpu"))
            for index in _wrong(outputs, targets, info.task):
                score = _score(outputs[index], targets[index], info.task)
                if len(worst) < limit or score > worst[0][0]:
                    item = (score, seen + index, _mistake(trained, batch, index, outputs[index],
                                                          targets[index], score))
                    (heapq.heappush if len(worst) < limit else heapq.heapreplace)(worst, item)
            seen += len(targets)
    return [m for _, _, m in sorted(worst, key=lambda e: (-e[0], e[1]))], seen


def _wrong(outputs: torch.Tensor, targets: torch.Tensor, task: str) -> list[int]:
    if task == "classify":
        return (outputs.argmax(dim=1) != targets).nonzero().flatten().tolist()
    return list(range(len(targets)))  # regression: every sample, ranked by its error


def _score(output: torch.Tensor, target: torch.Tensor, task: str) -> float:
    if task == "classify":
        return output.max().item()
    return (output.reshape(-1) - target.reshape(-1)).abs().mean().item()


def _mistake(trained: Trained, batch: dict, index: int, output: torch.Tensor,
             target: torch.Tensor, score: float) -> Mistake:
    info = trained.info
    key = batch.get("__key__")
    name = str(key[index]) if key is not None else f"sample {index}"
    if info.task == "classify":
        probs, ids = output.topk(min(TOP, len(output)))
        top = [(info.classes[i], p) for i, p in zip(ids.tolist(), probs.tolist(), strict=True)]
        return Mistake(name, info.classes[int(target)], top[0][0], score, top,
                       _png(batch, info, index))
    shown = ", ".join(f"{v:.4g}" for v in target.reshape(-1).tolist())
    guessed = ", ".join(f"{v:.4g}" for v in output.reshape(-1).tolist())
    return Mistake(name, shown, guessed, score, [], _png(batch, info, index))


def _png(batch: dict, info, index: int) -> bytes | None:
    """The sample's image as PNG bytes, for image data only."""
    if info.kind != "image":
        return None
    pixels = batch[info.inputs[0]][index]
    if pixels.ndim == 3:  # decoded: (C, H, W) uint8
        array = pixels.permute(1, 2, 0).squeeze(-1).numpy()
    else:  # grey pixels stored as an array: (H, W)
        array = pixels.numpy()
    if array.dtype != "uint8":
        return None
    out = io.BytesIO()
    Image.fromarray(array).save(out, format="PNG")
    return out.getvalue()
