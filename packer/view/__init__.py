"""`packer view`: one self-contained HTML page of a packed dataset (images inlined, no
server, no network), for a person to look at their data before training on it.

    collect.py   one pass through the loader: each sample's numbers, N kept per class
    problems.py  duplicates, dark or constant images, odd sizes, small classes
    images.py    image size and brightness, thumbnails and full images as data URIs
    fields.py    every field of a sample as the detail view shows it
    plots.py     the matplotlib figures (the class chart as inline SVG)
    page.py      the Jinja2 rendering of template.html.j2
"""

import os
from pathlib import Path

DEFAULT_PER_CLASS = 8
DEFAULT_MAX_SAMPLES = 50_000


def write_view(dataset, out: Path, per_class: int = DEFAULT_PER_CLASS,
               max_samples: int | None = DEFAULT_MAX_SAMPLES, seed: int = 0,
               progress: bool = False, cache_dir=None, cache_limit=None) -> dict:
    """Write the page of `dataset` (local or s3://) to `out`: what it found, as
    {output, bytes, read, count, problems}."""
    from packer.errors import UsageProblem
    from packer.read.dataset import open_packed
    from packer.view.collect import collect
    from packer.view.page import render
    from packer.view.problems import find_problems

    out = Path(out)
    if not out.parent.is_dir():
        raise UsageProblem(f"{out}: its folder {out.parent} does not exist; create it, or "
                           "give -o a path in a folder that exists")
    manifest, _ = open_packed(dataset, cache_dir, cache_limit)
    facts = collect(dataset, manifest, per_class, max_samples, seed, progress, cache_dir,
                    cache_limit)
    problems = find_problems(facts, manifest.get("classes"), manifest.get("class_counts"))
    html = render(dataset, manifest, facts, problems,
                  {"per_class": per_class, "max_samples": max_samples, "seed": seed})
    partial = out.with_name(out.name + ".partial")
    partial.write_text(html, encoding="utf-8")
    os.replace(partial, out)
    return {"output": str(out), "bytes": out.stat().st_size, "read": facts.read,
            "count": manifest["count"], "problems": {p.kind: p.count for p in problems}}
