"""What a user looks at: learning curves, the confusion matrix, sample grids, the lr test."""

import io
from pathlib import Path

import torch


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    matplotlib.rcParams["svg.fonttype"] = "none"  # an inline SVG's text stays text
    matplotlib.rcParams["svg.hashsalt"] = "train-report"  # the same page for the same run
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
    """Training and validation loss, the validation metric and the learning rate, by
    epoch; the best epoch marked."""
    return _saved(curves_figure(records, best_epoch), path, 90)


def curves_figure(records: list[dict], best_epoch: int):
    plt = _pyplot()
    epochs = [r["epoch"] for r in records]
    val = [r.get("val") or {} for r in records]
    metric = next((m for m in ("accuracy", "mae") if m in val[-1]), None)
    panels = 2 + bool(metric)
    figure, axes = plt.subplots(1, panels, figsize=(4.2 * panels, 3.6), squeeze=False)
    loss_axis, *others = axes[0]
    dots = {"marker": "o", "markersize": 3} if len(epochs) < 30 else {}  # one epoch shows
    loss_axis.plot(epochs, [r["train"]["loss"] for r in records], label="training", **dots)
    if val[-1]:
        loss_axis.plot(epochs, [v.get("loss") for v in val], label="validation", **dots)
    loss_axis.set(xlabel="epoch", ylabel="loss", title="loss")
    if metric:
        others[0].plot(epochs, [v.get(metric) for v in val], color="C1", **dots)
        others[0].set(xlabel="epoch", ylabel=metric, title=f"validation {metric}")
    lr_axis = others[-1]
    lr_axis.plot(epochs, [r.get("lr") for r in records], color="C4", **dots)
    lr_axis.set(xlabel="epoch", ylabel="learning rate", title="learning rate (epoch's end)")
    for axis in axes[0]:
        axis.axvline(best_epoch, color="C2", linestyle="--", label=f"best epoch {best_epoch}")
        axis.legend(fontsize=8)
    figure.tight_layout()
    return figure


def confusion(matrix: list[list[int]], classes: list[str], path: Path, epoch: int | None,
              title: str | None = None) -> Path:
    """Rows the true class, columns the predicted one, counts in the cells."""
    return _saved(confusion_figure(matrix, classes,
                                   title or f"validation, best epoch {epoch}"), path, 90)


def confusion_figure(matrix: list[list[int]], classes: list[str], title: str):
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
    axis.set(xlabel="predicted", ylabel="true", title=title)
    figure.tight_layout()
    return figure


def class_scores_figure(names: list[str], f1: list[float | None]):
    """Per-class F1 as horizontal bars, one per class (each bar's SVG id class-bar-N);
    a class with no validation sample gets no bar and says so."""
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(7, min(0.28 * len(names) + 1.2, 16)))
    positions = list(range(len(names)))
    bars = axis.barh(positions, [value or 0.0 for value in f1], color="#4c72b0")
    for position, (bar, value) in enumerate(zip(bars, f1, strict=True)):
        bar.set_gid(f"class-bar-{position}")
        axis.annotate("no samples" if value is None else f"{value:.2f}", (value or 0, position),
                      xytext=(3, 0), textcoords="offset points", va="center", fontsize=8)
    axis.set_yticks(positions, names if len(names) <= 60 else [""] * len(names), fontsize=8)
    axis.invert_yaxis()
    axis.set(xlim=(0, 1.12), xlabel="F1 (validation, best weights)")
    figure.tight_layout()
    return figure


def data_wait_figure(records: list[dict]):
    """The share of each epoch's step time spent waiting for data."""
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(7, 2.6))
    axis.bar([r["epoch"] for r in records],
             [100 * (r["train"].get("data_wait_share") or 0) for r in records], color="C7")
    axis.set(xlabel="epoch", ylabel="% of step time", ylim=(0, 100),
             title="time spent waiting for data")
    figure.tight_layout()
    return figure


def svg(figure) -> str:
    """The figure as an inline <svg> element (text kept as text), and closed."""
    out = io.StringIO()
    figure.savefig(out, format="svg", metadata={"Date": None})
    _pyplot().close(figure)
    text = out.getvalue()
    return text[text.index("<svg"):]


def _saved(figure, path: Path, dpi: int) -> Path:
    figure.savefig(path, dpi=dpi)
    _pyplot().close(figure)
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


def rows_grid(rows: dict[str, list], titles: list[str], path: Path, title: str) -> Path:
    """Images as (C, H, W) arrays in [0, 1], a row per name of `rows`, named on its left;
    `titles` over the columns."""
    plt = _pyplot()
    columns = max(len(images) for images in rows.values())
    figure, axes = plt.subplots(len(rows), columns, figsize=(1.4 * columns + 1, 1.4 * len(rows)),
                                squeeze=False)
    for index, (name, images) in enumerate(rows.items()):
        axes[index][0].set_ylabel(name, fontsize=8)
        for column, axis in enumerate(axes[index]):
            axis.set_xticks([])
            axis.set_yticks([])
            if column < len(images):
                image = torch.as_tensor(images[column]).clamp(0, 1)
                axis.imshow((image[0] if image.shape[0] == 1 else image.permute(1, 2, 0))
                            .numpy(), cmap="gray")
            if index == 0 and column < len(titles):
                axis.set_title(titles[column], fontsize=8)
    figure.suptitle(title)
    figure.tight_layout()
    return _saved(figure, path, 80)


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
