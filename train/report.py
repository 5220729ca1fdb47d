"""`train report RUN`: one self-contained HTML page of a run (written at the end of every
`train fit` too): the recipe and why, the curves, the per-class scores and confusion
matrix of the best epoch, the validation samples the best weights get wrong, and the
share of each epoch spent waiting for data. Jinja2 renders it; matplotlib draws its
plots as inline SVG; images are inlined, so it opens offline by double-click."""

import base64
import json
from importlib import resources
from pathlib import Path

import jinja2
from markupsafe import Markup

from packer.errors import PackerError
from train import plots
from train.mistakes import SHOWN, mistakes
from train.trained import load

TEMPLATE = "report.html.j2"


def write(run: str | Path, out: Path | None = None, shown: int = SHOWN,
          workers: int = 0) -> Path:
    """Write the page (OUT, or RUN/report.html); returns its path."""
    run = Path(run)
    summary, records = _history(run)
    trained = load(str(run))
    wrong, read = mistakes(trained, shown, workers)
    page = _render(run, summary, records, trained, wrong, read)
    out = out or run / "report.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.partial")
    partial.write_text(page, encoding="utf-8")
    partial.replace(out)
    return out


def _history(run: Path) -> tuple[dict, list[dict]]:
    """summary.json and the epoch records of metrics.jsonl."""
    try:
        summary = json.loads((run / "summary.json").read_text())
        lines = (run / "metrics.jsonl").read_text().splitlines()
    except FileNotFoundError as err:
        raise PackerError(f"{run}: not a finished run of train fit ({Path(err.filename).name} "
                          "is missing; a run writes it when it ends)") from None
    except json.JSONDecodeError as err:
        raise PackerError(f"{run / 'summary.json'}: not valid JSON ({err})") from None
    records = []
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            raise PackerError(f"{run / 'metrics.jsonl'}, line {number}: not valid JSON") from None
        if "epoch" in record and "train" in record and "step" not in record:
            records.append(record)
    return summary, records


def _render(run: Path, summary: dict, records: list[dict], trained, wrong: list,
            read: int) -> str:
    info = trained.info
    best = summary.get("best") or {}
    val = best.get("val") or {}
    environment = jinja2.Environment(
        loader=jinja2.FunctionLoader(_template), autoescape=True,
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    return environment.get_template(TEMPLATE).render(
        run=str(run), config=trained.config, info=info, summary=summary,
        headline=_headline(summary, val), recipe=_recipe(summary),
        curves=_markup(plots.curves_figure(records, summary["best_epoch"])) if records else None,
        wait=_markup(plots.data_wait_figure(records)) if records else None,
        waits=[(r["epoch"], r["train"].get("data_wait_share")) for r in records],
        classes=_classes(val, info.classes), confusion=_confusion(val, info.classes),
        mistakes=[_card(number, m) for number, m in enumerate(wrong)], read=read,
        task=info.task)


def _template(name: str) -> str:
    return (resources.files("train") / name).read_text(encoding="utf-8")


def _markup(figure) -> Markup:
    return Markup(plots.svg(figure))


def _headline(summary: dict, val: dict) -> list[tuple[str, str]]:
    rows = [("best epoch", f"{summary['best_epoch']} of {summary['epochs_run']} run "
                           f"({summary['epochs_planned']} planned"
                           f"{', stopped early' if summary.get('stopped_early') else ''})")]
    if summary.get("monitor"):
        rows.append(("chosen by", summary["monitor"]))
    for name in ("accuracy", "mae", "rmse", "loss"):
        if val.get(name) is not None:
            rows.append((f"validation {name}", f"{val[name]:.4f}"))
    rows.append(("samples/s", f"{summary.get('samples_per_s') or 0:,.0f}"))
    rows.append(("waiting for data", f"{100 * (summary.get('data_wait_share') or 0):.1f}% "
                                     "of step time"))
    return rows


def _recipe(summary: dict) -> list[tuple[str, str, str]]:
    return [(name.replace("_", "-"), str(choice.get("value")), choice.get("why", ""))
            for name, choice in (summary.get("chosen") or {}).items()]


def _classes(val: dict, names: list[str] | None) -> dict | None:
    """Per-class rows (precision, recall, F1, samples) and the F1 chart."""
    per_class, matrix = val.get("per_class"), val.get("confusion")
    if not per_class or not names:
        return None
    counts = [sum(row) for row in matrix] if matrix else [None] * len(names)
    rows = [{**scores, "name": name, "samples": count}
            for (name, scores), count in zip(per_class.items(), counts, strict=True)]
    f1 = [None if row["samples"] == 0 else row["f1"] for row in rows]
    return {"rows": rows, "chart": _markup(plots.class_scores_figure(names, f1))}


def _confusion(val: dict, names: list[str] | None) -> dict | None:
    matrix = val.get("confusion")
    if not matrix or not names:
        return None
    high = max(max(row) for row in matrix) or 1
    return {"names": names, "rows": [(name, [(n, n / high) for n in row])
                                     for name, row in zip(names, matrix, strict=True)]}


def _card(number: int, mistake) -> dict:
    png = mistake.png
    return {"id": f"mistake-{number}", "key": mistake.key, "truth": mistake.truth,
            "predicted": mistake.predicted, "score": mistake.score, "top": mistake.top,
            "image": f"data:image/png;base64,{base64.b64encode(png).decode('ascii')}"
            if png else None}
