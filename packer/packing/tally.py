"""The running counts of a pack: inputs done, skipped inputs, per-field totals, class
counts. Saved in progress.json with every part, so a resumed run continues them;
and what a pack that kept no input says about the skipped ones."""

import copy
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from packer.formats.base import Chunk
from packer.text import NAMES_LIMIT, names_text, plural


@dataclass
class Tally:
    """Running counts, saved with every part so a resumed run continues them."""

    next_input: int = 0
    skipped: list = field(default_factory=list)
    fields: dict = field(default_factory=dict)
    class_counts: list = field(default_factory=list)
    input_bytes: int = 0
    warnings: list = field(default_factory=list)  # of packed inputs: {"path", "warnings"}

    def add_chunk(self, chunk: Chunk) -> None:
        """Count a chunk's samples and the inputs skipped among them."""
        self._add_fields((name, *total) for name, total in chunk.totals.items())
        self._add_labels(chunk.labels)
        for entries in chunk.skipped.values():
            self.skipped += entries
        for entries in (chunk.warnings or {}).values():
            self.warnings += entries

    def upto(self, chunk: Chunk, stop: int, next_input: int) -> "Tally":
        """A copy that also counts the chunk's first `stop` good samples and the inputs
        skipped before them: the progress at a part closed inside the chunk."""
        snapshot = Tally(next_input, list(self.skipped), copy.deepcopy(self.fields),
                         list(self.class_counts), self.input_bytes, list(self.warnings))
        for sizes in chunk.field_sizes[:stop]:
            snapshot._add_fields((name, 1, size) for name, size in sizes)
        snapshot._add_labels(chunk.labels[:stop])
        boundary = chunk.good_positions()[stop]
        for position, entries in chunk.skipped.items():
            if position < boundary:
                snapshot.skipped += entries
        for position, entries in (chunk.warnings or {}).items():
            if position < boundary:
                snapshot.warnings += entries
        return snapshot

    def _add_fields(self, totals) -> None:
        for name, count, size in totals:
            entry = self.fields.setdefault(name, {"count": 0, "bytes": 0})
            entry["count"] += count
            entry["bytes"] += size
            self.input_bytes += size

    def _add_labels(self, labels: list) -> None:
        if not self.class_counts:  # no classes: a `cls` field is a sidecar file, not a label
            return
        for label, count in Counter(labels).items():
            if label is not None:
                self.class_counts[label] += count

    def add_block(self, columns: dict) -> None:
        rows = len(next(iter(columns.values())))
        self.add_rows(rows, {name: values.nbytes // rows for name, values in columns.items()},
                      columns.get("cls"))

    def add_rows(self, rows: int, sample_bytes: dict[str, int], labels) -> None:
        """Count `rows` samples of block sources: each field's bytes per sample (a
        class id counts none), and their class ids (an array, or None)."""
        for name, size in sample_bytes.items():
            size = 0 if name == "cls" else size * rows
            entry = self.fields.setdefault(name, {"count": 0, "bytes": 0})
            entry["count"] += rows
            entry["bytes"] += size
            self.input_bytes += size
        if labels is not None:
            import numpy as np  # block sources hold numpy columns; plain files never do

            counts = np.bincount(labels, minlength=len(self.class_counts))
            self.class_counts = [a + int(b) for a, b in zip(self.class_counts, counts,
                                                             strict=True)]


def _reason_groups(skipped: list[dict]) -> list[tuple[str, list[str]]]:
    """(reason, paths) for each reason, the most frequent first."""
    groups: dict[str, list[str]] = {}
    for entry in skipped:
        groups.setdefault(entry["reason"], []).append(entry["path"])
    return sorted(groups.items(), key=lambda group: -len(group[1]))


def nothing_packed(source: Path, skipped: list[dict], label_names: list[str] = ()) -> str:
    """Why a pack has no sample: every skip reason with its count and a few paths, and
    what the labels file names when inputs had no label in it."""
    if not skipped:
        return f"{source}: nothing to pack: no input files (hidden files and OS junk are ignored)"
    groups, texts = _reason_groups(skipped), []
    for reason, paths in groups[:NAMES_LIMIT]:
        example = f"e.g. {names_text(paths)}"
        if reason.startswith("no label in") and label_names:
            example += (f" — the labels file names {names_text(sorted(label_names))}; paths are "
                        f"relative to {source}")
        texts.append(f"{reason}: {len(paths):,} ({example})")
    if len(groups) > NAMES_LIMIT:
        texts.append(f"and {plural(len(groups) - NAMES_LIMIT, 'other reason')}")
    return f"{source}: nothing to pack: all {len(skipped):,} inputs were skipped: " + "; ".join(
        texts)
