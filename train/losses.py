"""The loss of each task: cross-entropy or focal loss, BCE for multi-label, MSE or L1."""

import torch
import torch.nn.functional as F
from torch import nn

from train.config import TrainConfig


class FocalLoss(nn.Module):
    """Cross-entropy with each sample's term scaled by (1 - p)^gamma, p the probability
    the model gives the true class: samples it already gets right count less, so rare
    and hard ones count more. At gamma 0 it is cross-entropy, weights included.
    Targets are class ids or, after MixUp/CutMix, class probabilities."""

    def __init__(self, gamma: float = 2.0, weight: torch.Tensor | None = None,
                 label_smoothing: float = 0.0):
        super().__init__()
        self.gamma, self.label_smoothing = gamma, label_smoothing
        self.register_buffer("weight", weight)

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        classes = logits.shape[1]
        hard = targets.ndim == 1
        soft = F.one_hot(targets, classes).to(logits.dtype) if hard else targets
        if self.label_smoothing:
            soft = soft * (1 - self.label_smoothing) + self.label_smoothing / classes
        log_p = F.log_softmax(logits, dim=1)
        terms = -soft * (1 - log_p.exp()) ** self.gamma * log_p
        if self.weight is not None:
            terms = terms * self.weight
        per_sample = terms.sum(dim=1)
        if hard and self.weight is not None:  # as cross-entropy: a mean weighted by class
            return per_sample.sum() / self.weight[targets].sum()
        return per_sample.mean()


def loss_function(task: str, class_counts: list[int] | None, config: TrainConfig) -> nn.Module:
    if task == "regress":
        return nn.L1Loss() if config.loss == "l1" else nn.MSELoss()
    if task == "multilabel":
        return nn.BCEWithLogitsLoss()
    weights = None
    if config.class_weights == "auto" and class_counts:
        counts = torch.tensor(class_counts, dtype=torch.float).clamp_min(1)
        weights = counts.sum() / (len(counts) * counts)
    if config.loss == "focal":
        return FocalLoss(config.focal_gamma, weights, config.label_smoothing)
    return nn.CrossEntropyLoss(weight=weights, label_smoothing=config.label_smoothing)
