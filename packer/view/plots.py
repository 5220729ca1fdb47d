"""The plots of a `packer view` page, drawn by matplotlib: the class chart as inline SVG
(each bar a `<g id="class-bar-N">`, so the page's bars can be found), the others as
PNG data URIs."""

import io

import numpy as np
from matplotlib import rcParams
from matplotlib.figure import Figure

from packer.view.images import data_uri

rcParams["svg.fonttype"] = "none"  # text stays text: smaller, and found by search
rcParams["svg.hashsalt"] = "packer-view"  # the same page for the same data
WIDTH = 7.5  # inches: the page's column at 100 dpi
MAX_PANELS = 24  # columns or fields plotted one panel each; the rest are listed only
WAVE_POINTS = 4000  # a waveform is drawn from at most this many points (min/max per bin)
SPLIT_COLOURS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860")


def class_chart(names: list[str], counts: list[int], title: str,
                splits: dict[str, list[int]] | None = None) -> str:
    """Per-class counts as horizontal bars, one per class, as an inline <svg> element;
    with `splits` ({split: per-class counts}), each bar cut into its splits' shares."""
    height = min(0.26 * len(names) + 1.0, 16) + (0.3 if splits else 0)
    figure = Figure(figsize=(WIDTH, height), layout="constrained")
    axes = figure.add_subplot()
    positions = np.arange(len(names))
    segments = splits or {None: counts}
    left = np.zeros(len(names))
    for number, (split, split_counts) in enumerate(segments.items()):
        bars = axes.barh(positions, split_counts, left=left, label=split,
                         color=SPLIT_COLOURS[number % len(SPLIT_COLOURS)])
        for bar, position in zip(bars, positions, strict=True):
            bar.set_gid(f"class-bar-{position}" if number == 0 else
                        f"split-bar-{position}-{number}")
        left = left + np.asarray(split_counts)
    for position, count in zip(positions, counts, strict=True):
        axes.annotate(f"{count:,}", (count, position), xytext=(3, 0),
                      textcoords="offset points", va="center", fontsize=8)
    if splits:
        axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, title="split",
                    title_fontsize=8)  # beside the bars, never over them
    axes.set_yticks(positions, names if len(names) <= 60 else [""] * len(names), fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel("samples")
    axes.set_title(title, fontsize=10)
    axes.margins(x=0.12)
    return _svg(figure)


def size_histograms(widths: list[int], heights: list[int]) -> str:
    """Histograms of image width and height, side by side."""
    figure = Figure(figsize=(WIDTH, 2.6), layout="constrained")
    for index, (values, label) in enumerate(((widths, "width"), (heights, "height"))):
        axes = figure.add_subplot(1, 2, index + 1)
        axes.hist(values, bins=min(40, max(5, len(set(values)))), color="#55a868")
        axes.set_xlabel(f"{label} (px)")
        axes.set_ylabel("images")
    return _png(figure)


def column_histograms(columns: list[str], rows: np.ndarray) -> str:
    """One histogram per table column (the first MAX_PANELS), in a grid."""
    shown = columns[:MAX_PANELS]
    figure = _grid(len(shown))
    for index, name in enumerate(shown):
        axes = figure.add_subplot(_rows(len(shown)), 4, index + 1)
        values = rows[:, index]
        axes.hist(values[np.isfinite(values)], bins=20, color="#8172b3")
        axes.set_title(name, fontsize=8)
        axes.tick_params(labelsize=7)
    return _png(figure)


def record_plots(fields: dict[str, np.ndarray]) -> str:
    """Each field of the first records, against the record index (the first
    MAX_PANELS fields; an array field as one line per element, at most 8)."""
    shown = list(fields.items())[:MAX_PANELS]
    figure = Figure(figsize=(WIDTH, 1.7 * len(shown) + 0.3), layout="constrained")
    for index, (name, values) in enumerate(shown):
        axes = figure.add_subplot(len(shown), 1, index + 1)
        lines = values.reshape(len(values), -1)[:, :8].astype(np.float64)
        axes.plot(lines, linewidth=0.8)
        axes.set_title(name, fontsize=8, loc="left")
        axes.tick_params(labelsize=7)
    figure.supxlabel("record", fontsize=8)
    return _png(figure)


def waveform(values: np.ndarray) -> str:
    """A long signal (frames, or frames x channels) drawn as its envelope."""
    lines = values.reshape(len(values), -1).astype(np.float64)
    figure = Figure(figsize=(WIDTH, 1.6), layout="constrained")
    axes = figure.add_subplot()
    bins = max(1, len(lines) // WAVE_POINTS)
    usable = len(lines) // bins * bins
    binned = lines[:usable].reshape(-1, bins, lines.shape[1])
    for channel in range(min(lines.shape[1], 4)):
        axes.fill_between(np.arange(len(binned)) * bins, binned[:, :, channel].min(axis=1),
                          binned[:, :, channel].max(axis=1), linewidth=0.5, alpha=0.7)
    axes.set_xlabel("frame", fontsize=8)
    axes.tick_params(labelsize=7)
    return _png(figure)


def _grid(panels: int) -> Figure:
    return Figure(figsize=(WIDTH, 1.8 * _rows(panels) + 0.2), layout="constrained")


def _rows(panels: int) -> int:
    return max(1, -(-panels // 4))


def _svg(figure: Figure) -> str:
    out = io.StringIO()
    figure.savefig(out, format="svg", metadata={"Date": None})
    text = out.getvalue()
    return text[text.index("<svg"):]


def _png(figure: Figure) -> str:
    out = io.BytesIO()
    figure.savefig(out, format="png", dpi=100, metadata={"Software": None})
    return data_uri(out.getvalue(), "image/png")
