"""Possible problems that looking at the samples finds: the same payload more than once
(and under two classes), dark or constant images, sizes and aspect ratios far from the
rest, and classes too small to learn."""

from collections import defaultdict
from dataclasses import dataclass
from statistics import median

from packer.view.collect import Facts, SampleFacts

DARK = 10.0  # mean grey level (0..255) at or below which an image is near-black
CONSTANT = 2  # brightest minus darkest grey level at or below which an image is one colour
ASPECT = 4.0  # a longer side this many times the shorter one is extreme
SIZE_FACTOR = 4.0  # a side this many times smaller or larger than the median side is extreme
SMALL_CLASS = 0.01  # a class holding under this share of the samples read is small
LISTED = 200  # entries of one kind the page lists (the count is always given)


@dataclass
class Problem:
    """One kind of problem: what it is, how many, and the samples (or groups) it names."""

    kind: str
    rule: str  # the rule that found it, in words
    entries: list  # SampleFacts, or lists of SampleFacts for duplicate groups
    count: int


def find_problems(facts: Facts, classes: list[str] | None,
                  class_counts: list[int] | None) -> list[Problem]:
    """Every kind of problem found, most serious first; kinds with nothing found are left
    out (the page says that none was found). `class_counts`: of every sample, by class id
    (the manifest's)."""
    found = [*duplicates(facts.samples), *image_problems(facts.samples),
             *small_classes(classes or [], class_counts or [])]
    return [problem for problem in found if problem.count]


def duplicates(samples: list[SampleFacts]) -> list[Problem]:
    """Groups of samples with byte-identical payloads: under two classes or more, and
    under one class."""
    groups = defaultdict(list)
    for sample in samples:
        groups[sample.digest].append(sample)
    repeated = [group for group in groups.values() if len(group) > 1]
    across = [g for g in repeated if len({s.label for s in g}) > 1]
    within = [g for g in repeated if len({s.label for s in g}) == 1]
    return [
        Problem("The same payload under different classes",
                "byte-identical images (samples without one: every field but the key "
                "and the label) whose labels differ: one of the labels is wrong",
                across[:LISTED], len(across)),
        Problem("Duplicate payloads", "byte-identical images (or samples) under one class: the "
                "sample counts more than once, and may fall in two splits",
                within[:LISTED], len(within)),
    ]


def image_problems(samples: list[SampleFacts]) -> list[Problem]:
    """Near-black, one-colour, and oddly sized or shaped images."""
    images = [s for s in samples if s.width]
    dark = [s for s in images if s.brightness <= DARK]
    constant = [s for s in images if s.spread <= CONSTANT and s.brightness > DARK]
    odd = _odd_sizes(images)
    return [
        Problem("Near-black images", f"mean grey level at most {DARK:g} of 255", dark[:LISTED],
                len(dark)),
        Problem("Constant images", f"every pixel within {CONSTANT} grey levels of the others "
                "(one flat colour, not black)", constant[:LISTED], len(constant)),
        Problem("Extreme sizes or aspect ratios", f"a side {SIZE_FACTOR:g}x smaller or larger "
                f"than the median side, or one side {ASPECT:g}x the other", odd[:LISTED],
                len(odd)),
    ]


def _odd_sizes(images: list[SampleFacts]) -> list[SampleFacts]:
    if not images:
        return []
    middle = median([side for s in images for side in (s.width, s.height)])
    low, high = middle / SIZE_FACTOR, middle * SIZE_FACTOR
    return [s for s in images
            if max(s.width, s.height) / min(s.width, s.height) >= ASPECT
            or min(s.width, s.height) < low or max(s.width, s.height) > high]


def small_classes(classes: list[str], counts: list[int]) -> list[Problem]:
    """Classes with under 1% of all the samples (of the manifest's counts, not of the
    samples read, so that a random subset does not make a class look small)."""
    if not counts or len(counts) != len(classes):
        return []
    total = sum(counts)
    small = [(name, count) for name, count in zip(classes, counts, strict=True)
             if count < SMALL_CLASS * total]
    return [Problem("Small classes", f"fewer than {SMALL_CLASS:.0%} of the samples",
                    small, len(small))]
