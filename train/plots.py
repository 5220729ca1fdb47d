"""What a user looks at: learning curves, the confusion matrix, sample grids, the lr test."""

from pathlib import Path

import torch


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def after_fit(out: Path, records: list[dict], best_epoch: int,
              classes: list[str] | None) -> list[str]:
    """OUT/curves.png and, for classification with validation, OUT/confusion.png."""
    if not records:
        return []
    written = [str(curves(records, best_epoch, out / "curves.png"))]
    best = next((r for r in records if r["epoch"] == best_epoch), records[-1])
    matrix = (best.get("val") or {}).get("confusion")
    if matrix and classes:
        written.append(str(confusion(matrix, classes, out / "confusion.png", best_epoch)))
    return written


def curves(records: list[dict], best_epoch: int, path: Path) -> Path:
    """Training and validation loss, and the validation metric, by epoch; the best
    epoch marked."""
    plt = _pyplot()
    epochs = [r["epoch"] for r in records]
    val = [r.get("val") or {} for r in records]
    metric = next((m for m in ("accuracy", "mae") if m in val[-1]), None)
    figure, axes = plt.subplots(1, 2 if metric else 1, figsize=(10 if metric else 5, 4),
                                squeeze=False)
    loss_axis = axes[0][0]
    loss_axis.plot(epochs, [r["train"]["loss"] for r in records], label="training")
    if val[-1]:
        loss_axis.plot(epochs, [v.get("loss") for v in val], label="validation")
    loss_axis.set(xlabel="epoch", ylabel="loss", title="loss")
    if metric:
        metric_axis = axes[0][1]
        metric_axis.plot(epochs, [v.get(metric) for v in val], color="C1")
        metric_axis.set(xlabel="epoch", ylabel=metric, title=f"validation {metric}")
    for axis in axes[0]:
        axis.axvline(best_epoch, color="C2", linestyle="--", label=f"best epoch {best_epoch}")
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path


def confusion(matrix: list[list[int]], classes: list[str], path: Path, epoch: int | None,
              title: str | None = None) -> Path:
    """Rows the true class, columns the predicted one, counts in the cells."""
    plt = _pyplot()
    size = len(classes)
    figure, axis = plt.subplots(figsize=(max(4, 0.5 * size + 2), max(4, 0.5 * size + 1.5)))
    axis.imshow(matrix, cmap="Blues")
    if size <= 30:
        high = max(max(row) for row in matrix) or 1
        for row in range(size):
            for column in range(size):
                value = matrix[row][column]
                axis.text(column, row, str(value), ha="center", va="center", fontsize=7,
                          color="white" if value > high / 2 else "black")
        axis.set_xticks(range(size), classes, rotation=90, fontsize=7)
        axis.set_yticks(range(size), classes, fontsize=7)
    axis.set(xlabel="predicted", ylabel="true", title=title or f"validation, best epoch {epoch}")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path


def grid(images: list, titles: list[str], path: Path, title: str | None = None) -> Path:
    """Up to 16 samples in a 4x4 grid: images as (C, H, W) or (H, W) arrays in [0, 1]
    or uint8, anything else as a line plot."""
    plt = _pyplot()
    figure, axes = plt.subplots(4, 4, figsize=(8, 8))
    for index, axis in enumerate(axes.flat):
        axis.axis("off")
        if index >= len(images):
            continue
        image = torch.as_tensor(images[index])
        if image.is_floating_point() and image.ndim == 3:
            image = image.clamp(0, 1)
        if image.ndim == 3:
            shown = image[0] if image.shape[0] == 1 else image.permute(1, 2, 0)
            axis.imshow(shown.numpy(), cmap="gray")
        elif image.ndim == 2 and image.dtype == torch.uint8:
            axis.imshow(image.numpy(), cmap="gray")
        else:
            axis.plot(image.float().reshape(len(image), -1).numpy())
        axis.set_title(titles[index], fontsize=8)
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)
    return path


def lr_test(rates: list, losses: list, suggested: float, path: Path) -> Path:
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(6, 4))
    axis.plot(rates, losses)
    axis.axvline(suggested, color="C1", linestyle="--", label=f"suggested {suggested:.2g}")
    axis.set(xscale="log", xlabel="learning rate", ylabel="loss (smoothed)",
             title="learning-rate range test")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
