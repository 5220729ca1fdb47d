"""Validation metrics, accumulated over batches and reduced across ranks.

Classification: accuracy, and per class precision, recall, F1 and the confusion matrix.
Regression: MAE and RMSE (per target too). Multi-label: element-wise accuracy, and per
label precision, recall and F1 (a label is predicted where its logit is above 0) and
average precision (AP, over the ranking of the scores, as scikit-learn's
average_precision_score), with their mean, mAP, over the labels the samples hold."""

import math

import torch
import torch.distributed as dist


class Metrics:
    def __init__(self, task: str, classes: list[str] | None, device: torch.device):
        self.task, self.classes = task, classes
        size = len(classes) if classes and task == "classify" else 0
        self.confusion = torch.zeros(size, size, dtype=torch.long, device=device)
        self.sums = torch.zeros(4, dtype=torch.float64, device=device)  # loss, n, |e|, e^2
        self.target_errors = None  # regression: |e| summed per target
        self.scores, self.truths = [], []  # multi-label: every sample's, for AP

    def update(self, loss: torch.Tensor, outputs: torch.Tensor, targets: torch.Tensor) -> None:
        count = targets.shape[0]
        self.sums[0] += loss.detach().double() * count
        self.sums[1] += count
        if self.task == "classify":
            size = len(self.classes)
            predicted = outputs.argmax(dim=1)
            self.confusion += torch.bincount(targets * size + predicted,
                                             minlength=size * size).view(size, size)
        elif self.task == "regress":  # one target or several, (B,) or (B, T)
            error = outputs.double().reshape(count, -1) - targets.double().reshape(count, -1)
            self.sums[2] += error.abs().mean(dim=1).sum()
            self.sums[3] += (error ** 2).mean(dim=1).sum()
            if self.target_errors is None:
                self.target_errors = torch.zeros(error.shape[1], dtype=torch.float64,
                                                 device=error.device)
            self.target_errors += error.abs().sum(dim=0)
        else:
            correct = ((outputs > 0) == (targets > 0.5)).double().mean(dim=1)
            self.sums[2] += correct.sum()
            self.scores.append(outputs.detach().float().cpu())
            self.truths.append((targets > 0.5).cpu())

    def result(self) -> dict:
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(self.sums)
            dist.all_reduce(self.confusion)
            if self.target_errors is not None:
                dist.all_reduce(self.target_errors)
        count = max(self.sums[1].item(), 1)
        out = {"loss": self.sums[0].item() / count, "samples": int(self.sums[1].item())}
        if self.task == "classify":
            out.update(_classification(self.confusion.cpu(), self.classes))
        elif self.task == "regress":
            out.update(mae=self.sums[2].item() / count, rmse=(self.sums[3].item() / count) ** .5)
            if self.target_errors is not None and len(self.target_errors) > 1:
                out["mae_per_target"] = (self.target_errors / count).tolist()
        else:
            out["accuracy"] = self.sums[2].item() / count
            out.update(_multilabel(*self._every_sample(), self.classes))
        return out

    def _every_sample(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The scores and truths of every rank's samples."""
        scores = torch.cat(self.scores) if self.scores else torch.zeros(0, len(self.classes))
        truths = torch.cat(self.truths) if self.truths else torch.zeros(0, len(self.classes),
                                                                       dtype=torch.bool)
        if dist.is_available() and dist.is_initialized():
            gathered = [None] * dist.get_world_size()
            dist.all_gather_object(gathered, (scores, truths))
            scores = torch.cat([s for s, _ in gathered])
            truths = torch.cat([t for _, t in gathered])
        return scores, truths


def strict_json(value):
    """`value` with every NaN or infinite float as None: JSON that strict parsers read."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict_json(v) for v in value]
    return value


def _multilabel(scores: torch.Tensor, truths: torch.Tensor, labels: list[str]) -> dict:
    """Per label: precision, recall, F1, AP and its positive samples (recall, F1 and AP
    None for a label no sample has); mAP and macro-F1 over the labels some sample has."""
    predicted = scores > 0
    true_positive = (predicted & truths).sum(0).double()
    positives = truths.sum(0)
    precision = true_positive / predicted.sum(0).clamp_min(1)
    recall = true_positive / positives.clamp_min(1)
    f1 = 2 * precision * recall / (precision + recall).clamp_min(1e-12)
    per_label = {}
    for j, name in enumerate(labels):
        held = bool(positives[j])
        per_label[name] = {"precision": precision[j].item(),
                           "recall": recall[j].item() if held else None,
                           "f1": f1[j].item() if held else None,
                           "ap": average_precision(scores[:, j], truths[:, j]) if held else None,
                           "samples": int(positives[j])}
    held = [scores for scores in per_label.values() if scores["ap"] is not None]
    return {"per_label": per_label,
            "map": sum(s["ap"] for s in held) / len(held) if held else None,
            "macro_f1": sum(s["f1"] for s in held) / len(held) if held else None}


def average_precision(scores: torch.Tensor, truths: torch.Tensor) -> float:
    """The mean, over the positive samples, of the precision among the samples scored at
    least as high as each (ties broken by order)."""
    hits = truths[torch.argsort(scores, descending=True, stable=True)].double()
    precision_at = hits.cumsum(0) / torch.arange(1, len(hits) + 1, dtype=torch.float64)
    return (precision_at * hits).sum().item() / hits.sum().item()


def _classification(confusion: torch.Tensor, classes: list[str]) -> dict:
    """Per class: precision, recall, F1 and the class's samples; recall and F1 are None
    (JSON null, shown as "no samples") for a class the samples lack, not a score of 0."""
    true_positive = confusion.diag().double()
    precision = true_positive / confusion.sum(0).clamp_min(1)
    support = confusion.sum(1)
    recall = true_positive / support.clamp_min(1)
    f1 = 2 * precision * recall / (precision + recall).clamp_min(1e-12)
    per_class = {}
    for name, p, r, f, n in zip(classes, precision.tolist(), recall.tolist(), f1.tolist(),
                                support.tolist(), strict=True):
        per_class[name] = {"precision": p, "recall": r if n else None, "f1": f if n else None,
                           "samples": n}
    return {"accuracy": true_positive.sum().item() / max(confusion.sum().item(), 1),
            "per_class": per_class, "confusion": confusion.tolist()}
