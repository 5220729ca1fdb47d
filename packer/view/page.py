"""The `packer view` page rendered: the facts gathered from the manifest and the data
laid out for the Jinja2 template (`template.html.j2`, package data)."""

import json
from collections import defaultdict
from importlib import resources

import jinja2
import numpy as np
from markupsafe import Markup

from packer.datasets.info import labels_text, leak_text, splits_summary
from packer.manifest import class_counts
from packer.packing.transform import reencoded_text
from packer.sample import KEY
from packer.view import plots
from packer.view.collect import Facts
from packer.view.fields import shown_fields
from packer.view.images import thumbnail_uri
from packer.view.problems import Problem

TEMPLATE = "template.html.j2"


def render(dataset, manifest: dict, facts: Facts, problems: list[Problem],
           settings: dict) -> str:
    """The whole page as one HTML string: no file or address outside it is needed."""
    environment = jinja2.Environment(
        loader=jinja2.FunctionLoader(_template), autoescape=True,
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    classes = manifest.get("classes") or []
    columns = (manifest.get("table") or {}).get("features")
    return environment.get_template(TEMPLATE).render(
        title=str(dataset), dataset=str(dataset), manifest=manifest, facts=facts,
        settings=settings, overview=overview(manifest, facts),
        class_chart=_class_chart(manifest), sizes=_sizes(facts),
        grids=grids(facts, classes, columns), skipped=skipped_groups(manifest["skipped"]),
        problems=[_problem_view(p, classes) for p in problems],
        table=table_view(manifest, facts),
        records=_record_plot(facts, bool((manifest.get("source") or {}).get("window"))),
        class_name=lambda label: _class_name(label, classes))


def _template(name: str) -> str:
    return (resources.files("packer.view") / name).read_text(encoding="utf-8")


def overview(manifest: dict, facts: Facts) -> dict:
    """The rows of the overview: the dataset as the manifest records it."""
    fields = [{"name": name, "dtype": field.get("dtype", ""),
               "shape": "×".join(map(str, field["shape"])) if field.get("shape") else "",
               "count": field.get("count", 0), "bytes": field.get("bytes", 0)}
              for name, field in manifest["fields"].items()]
    return {
        "format": manifest["format"], "count": manifest["count"], "read": facts.read,
        "fields": fields, "bytes": sum(part.get("bytes", 0) for part in manifest["parts"]),
        "parts": len(manifest["parts"]), "labels": labels_text(manifest),
        "classes": len(manifest.get("classes") or []),
        "source": _settings_rows(manifest.get("source") or {}),
        "options": _settings_rows(manifest.get("options") or {}),
        "transform": reencoded_text(manifest) or "none: the samples are stored as read",
        "created": manifest.get("created", ""), "tool": manifest.get("tool", ""),
        "warnings": manifest.get("warnings") or [], "ignored": manifest.get("ignored") or [],
        "splits": splits_summary(manifest),
        "leaks": [leak_text(leak) for leak in (manifest.get("splits") or {}).get("leaks", [])],
    }


def _settings_rows(settings: dict) -> list[tuple[str, str]]:
    """(name, value) of the settings that are set (not None, empty or false)."""
    return [(name, value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
            for name, value in settings.items() if value not in (None, [], {}, "", False)]


def _class_chart(manifest: dict) -> Markup | None:
    counts = class_counts(manifest)
    if not counts:
        return None
    splits = (manifest.get("splits") or {}).get("sets")
    by_split = {name: entry["class_counts"] for name, entry in (splits or {}).items()}
    chart = plots.class_chart(list(counts), list(counts.values()),
                              f"samples per class (all {manifest['count']:,})"
                              + (", by split" if by_split else ""), by_split or None)
    return Markup(chart)


def _sizes(facts: Facts) -> dict | None:
    images = [s for s in facts.samples if s.width]
    if not images:
        return None
    widths, heights = [s.width for s in images], [s.height for s in images]
    return {"plot": plots.size_histograms(widths, heights), "images": len(images),
            "width": (min(widths), int(np.median(widths)), max(widths)),
            "height": (min(heights), int(np.median(heights)), max(heights))}


def grids(facts: Facts, classes: list[str], columns: list[str] | None) -> list[dict]:
    """Per class (or one group of unlabelled samples): its kept samples, each with its
    thumbnail and every field for the detail view."""
    counts = facts.class_counts()
    sizes = {s.key: s for s in facts.samples}
    result, number = [], 0
    for label, samples in facts.kept.items():
        cards = []
        for sample in samples:
            number += 1
            cards.append(_card(f"sample-{number}", sample, sizes.get(sample[KEY]), columns))
        result.append({"label": label, "name": _class_name(label, classes),
                       "read": counts[label], "cards": cards})
    return result


def _card(anchor: str, sample: dict, facts, columns: list[str] | None) -> dict:
    fields = shown_fields(sample, columns)
    image = next((f for f in fields if f["kind"] == "image"), None)
    thumbnail = None
    if image is not None:
        name = image["name"]
        thumbnail = thumbnail_uri(name, bytes(sample[name]))
    size = f"{facts.width}×{facts.height} px" if facts and facts.width else ""
    return {"id": anchor, "key": sample[KEY], "label": sample.get("cls"), "size": size,
            "bytes": facts.bytes if facts else 0, "thumbnail": thumbnail, "fields": fields}


def _class_name(label, classes: list[str]) -> str:
    if label is None:
        return "unlabelled"
    return classes[label] if 0 <= label < len(classes) else str(label)


def skipped_groups(skipped: list[dict]) -> list[dict]:
    """Skipped inputs grouped by the kind of reason (the reason up to its first colon:
    `not a JPEG`), largest group first; every path listed with its whole reason."""
    groups = defaultdict(list)
    for entry in skipped:
        groups[entry["reason"].split(":", 1)[0]].append(entry)
    return [{"reason": reason, "entries": entries}
            for reason, entries in sorted(groups.items(), key=lambda g: (-len(g[1]), g[0]))]


def _problem_view(problem: Problem, classes: list[str]) -> dict:
    rows = []
    for entry in problem.entries:
        if isinstance(entry, list):  # a group of duplicates
            rows.append(", ".join(f"{s.key} ({_class_name(s.label, classes)})" for s in entry))
        elif isinstance(entry, tuple):  # a small class: (name, count)
            rows.append(f"{entry[0]}: {entry[1]:,} samples")
        else:
            size = f", {entry.width}×{entry.height} px" if entry.width else ""
            grey = f", mean grey {entry.brightness:.0f}" if entry.brightness is not None else ""
            rows.append(f"{entry.key} ({_class_name(entry.label, classes)}{size}{grey})")
    return {"kind": problem.kind, "rule": problem.rule, "count": problem.count, "rows": rows}


def table_view(manifest: dict, facts: Facts) -> dict | None:
    """A table's columns: the manifest's statistics, the cells `--na` filled, and
    histograms of the rows read."""
    table = manifest.get("table")
    if not table:
        return None
    columns = table.get("features") or []
    stats = table.get("stats") or {}
    rows = [{"name": name, **stats.get(name, {})} for name in columns]
    plot = None
    if facts.features and columns and facts.features[0].shape == (len(columns),):
        plot = plots.column_histograms(columns, np.stack(facts.features).astype(np.float64))
    return {"columns": rows, "na": table.get("na"), "plot": plot,
            "plotted": min(len(columns), plots.MAX_PANELS),
            "categorical": table.get("categorical") or {}}


def _record_plot(facts: Facts, windows: bool) -> dict | None:
    """Each numeric field of the first samples against the record index: windows of
    records (`--window`) laid end to end, so that a field plots as the dump's signal."""
    if not facts.first:
        return None
    fields = {}
    for name in facts.first[0]:
        values = [_numbers(sample.get(name)) for sample in facts.first]
        if name in (KEY, "cls") or any(v is None or v.shape != values[0].shape for v in values):
            continue
        fields[name] = np.concatenate(values) if windows and values[0].ndim else np.stack(values)
    if not fields:
        return None
    return {"plot": plots.record_plots(fields), "samples": len(facts.first),
            "records": len(next(iter(fields.values())))}


def _numbers(value) -> np.ndarray | None:
    array = value.numpy() if hasattr(value, "numpy") else value
    if isinstance(array, np.ndarray) and array.dtype.kind in "iufb":
        return array
    return None
