"""Splits made at pack time: `--split train=0.8,val=0.1,test=0.1` (stratified by class,
or with `--split-by` keeping groups whole; seeded), or the `train/`, `val/`, `test/`
folders at the top of a source; and the leakage check: identical content in two splits.

What each stored sample is (key, label, content digest) comes from
packer.packing.sample_log; this module decides the split of each and describes it for
the manifest's `splits` entry:

    {"method": "ratios" | "folders", "ratios": {name: share}, "by": FIELD or None,
     "stratified": bool, "seed": int,
     "sets": {name: {"count": n, "class_counts": [...] or None,
                     "ranges": [[first, stop], ...]}},   # sample indices first..stop-1
     "leaks": [{"sha256": hex, "keys": {name: [key, ...]}}], "leak_count": n}
"""

import re

import numpy as np

from packer.errors import UsageProblem
from packer.sample import decode_key
from packer.sources.files.scan import split_rank

LEAKS_LISTED = 100  # leaks named in the manifest; `leak_count` counts them all
_NAME = re.compile(r"[A-Za-z0-9_-]+$")


def parse_ratios(text: str) -> dict[str, float]:
    """`train=0.8,val=0.1,test=0.1` -> {"train": 0.8, ...}: names unique, shares above 0
    adding up to 1."""
    ratios = {}
    for item in text.split(","):
        name, eq, value = item.strip().partition("=")
        try:
            share = float(value)
        except ValueError:
            share = -1.0
        if not eq or not _NAME.match(name) or not 0 < share <= 1 or name in ratios:
            raise UsageProblem(f"--split {text}: give NAME=SHARE pairs, each name once and "
                               "each share above 0, e.g. --split train=0.8,val=0.1,test=0.1")
        ratios[name] = share
    if abs(sum(ratios.values()) - 1) > 1e-6:
        raise UsageProblem(f"--split {text}: the shares add up to {sum(ratios.values()):g}, "
                           "not 1; e.g. --split train=0.8,val=0.1,test=0.1")
    return ratios


def folder_split(key: str) -> str:
    """The split of a sample packed from `SOURCE/train/...`: its key's top folder."""
    return key.split("/", 1)[0]


def group_of(key: str, by: str) -> str:
    """The group of a sample for `--split-by folder:N`: the first N folders of its path."""
    levels = int(by.partition(":")[2])
    return "/".join(decode_key(key).split("/")[:-1][:levels])


def check_split_options(options) -> None:
    """--split's shares and --split-by's form, before anything is read."""
    if options.split:
        parse_ratios(options.split)
    by = options.split_by
    if by is not None and not options.split:
        raise UsageProblem(f"--split-by {by} says what --split keeps together; give --split "
                           "too, e.g. --split train=0.8,val=0.2 --split-by folder:1")
    if by is not None and not re.fullmatch(r"folder:[1-9][0-9]*", by):
        raise UsageProblem(f"--split-by {by}: give folder:N, the first N folders of each "
                           "file's path as its group (e.g. folder:1 for PATIENT/scan.png, "
                           "folder:2 for CLASS/PATIENT/scan.png)")


def check_split_source(source, options) -> None:
    """--split-by needs paths (a folder of files); --split, a source without split folders."""
    folders = getattr(source, "split_folders", None)
    if options.split and folders:
        raise UsageProblem(f"--split {options.split}: {source.path} is split already, by its "
                           f"folders {', '.join(folders)}, and those splits are kept; leave "
                           "out --split (or pack a folder without them)")
    if options.split_by and source.kind != "files":
        raise UsageProblem(f"--split-by {options.split_by}: groups come from the folders of "
                           f"a folder of files' paths; {source.path} is a {source.kind} "
                           "source, whose samples have none. Leave out --split-by")


def assign_ratios(count: int, ratios: dict[str, float], seed: int, labels=None,
                  groups=None) -> np.ndarray:
    """The split number (in `ratios`' order) of each of `count` samples: groups kept
    whole when given, else stratified by `labels` (ints, or None: not stratified)."""
    rng = np.random.default_rng(seed)
    shares = np.array(list(ratios.values()))
    if groups is not None:
        return _by_groups(groups, shares, rng)
    labels = np.zeros(count, np.int64) if labels is None else np.asarray(labels)
    split = np.empty(count, np.int64)
    carry = np.zeros(len(shares))  # the whole run's shares so far, less what was given
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        carry, split[members] = _cut(members, shares, carry, len(members))
    return split


def _cut(members: np.ndarray, shares: np.ndarray, carry: np.ndarray,
         count: int) -> tuple[np.ndarray, np.ndarray]:
    """Each split's whole share of `count` members, one more for as many splits as
    members are left over, among those whose share has a fraction, the ones furthest
    behind their share of everything so far (`carry`) first: every class gets the floor
    or the ceiling of its share in each split, and the totals stay within a sample."""
    exact = shares * count
    sizes = np.floor(exact).astype(np.int64)
    carry = carry + exact - sizes
    fractional = np.flatnonzero(exact - sizes > 1e-9)
    for split in fractional[np.argsort(-carry[fractional], kind="stable")][
            :count - int(sizes.sum())]:
        sizes[split] += 1
        carry[split] -= 1
    return carry, np.repeat(np.arange(len(shares)), sizes)


def _by_groups(groups: list, shares: np.ndarray, rng) -> np.ndarray:
    """Whole groups, in a seeded order, each to the split furthest behind its share, as a
    share of its goal (so that few groups still reach every split)."""
    names, group_ids, sizes = np.unique(np.asarray(groups, dtype=object).astype(str),
                                        return_inverse=True, return_counts=True)
    given, goal = np.zeros(len(shares)), shares * len(groups)
    group_split = np.empty(len(names), np.int64)
    for group in rng.permutation(len(names)):
        behind = int(np.argmax((goal - given) / goal))
        group_split[group] = behind
        given[behind] += sizes[group]
    return group_split[group_ids]


def manifest_entry(names: list[str], split: np.ndarray, labels, classes, keys: list[str],
             contents: list[bytes], settings: dict) -> dict:
    """The manifest's `splits` entry for `split` (a number per stored sample)."""
    sets = {}
    for number, name in enumerate(names):
        members = np.flatnonzero(split == number)
        counts = None
        if classes:
            counts = np.bincount(np.asarray(labels)[members], minlength=len(classes)).tolist()
        sets[name] = {"count": len(members), "class_counts": counts,
                      "ranges": _ranges(members)}
    leaks = _leaks(names, split, keys, contents)
    return {**settings, "sets": sets, "leaks": leaks[:LEAKS_LISTED], "leak_count": len(leaks)}


def _ranges(members: np.ndarray) -> list[list[int]]:
    """Sorted indices as [first, stop) runs."""
    if not len(members):
        return []
    breaks = np.flatnonzero(np.diff(members) != 1) + 1
    starts = np.concatenate([[0], breaks])
    stops = np.concatenate([breaks, [len(members)]])
    return [[int(members[a]), int(members[b - 1]) + 1] for a, b in zip(starts, stops,
                                                                        strict=True)]


def _leaks(names: list[str], split: np.ndarray, keys: list[str],
           contents: list[bytes]) -> list[dict]:
    """Each content found in two splits or more, with its keys per split."""
    where: dict[bytes, list[int]] = {}
    for index, content in enumerate(contents):
        where.setdefault(content, []).append(index)
    leaks = []
    for content, indices in where.items():
        if len(indices) > 1 and len({int(split[i]) for i in indices}) > 1:
            by_split: dict[str, list[str]] = {}
            for i in indices:
                by_split.setdefault(names[split[i]], []).append(keys[i])
            leaks.append({"sha256": content.hex(), "keys": by_split})
    return sorted(leaks, key=lambda leak: sorted(leak["keys"].values()))


def splits_entry(keys: list[str], labels: list, contents: list[bytes], classes,
                 options, folders: list[str] | None) -> dict | None:
    """The manifest's `splits` entry of the stored samples: by the source's split
    folders, or by `options.split` (None when the pack makes no split)."""
    if folders:
        names = sorted(folders, key=split_rank)  # a split left empty by --dedupe too
        split = np.array([names.index(folder_split(key)) for key in keys], np.int64)
        settings = {"method": "folders", "ratios": None, "by": None, "stratified": False,
                    "seed": None}
    elif options.split:
        ratios = parse_ratios(options.split)
        names = list(ratios)
        groups = [group_of(key, options.split_by) for key in keys] if options.split_by else None
        stratified = bool(classes) and groups is None
        split = assign_ratios(len(keys), ratios, options.split_seed,
                              labels if stratified else None, groups)
        settings = {"method": "ratios", "ratios": ratios, "by": options.split_by,
                    "stratified": stratified, "seed": options.split_seed}
    else:
        return None
    entry = manifest_entry(names, split, labels, classes, keys, contents, settings)
    return {**entry, "notes": _notes(entry, options) + _folder_notes(folders or [])}


def _folder_notes(folders: list[str]) -> list[str]:
    """Split folders that a reader would take for one split: names that differ only in
    case (Train/, train/), or two names for validation (val/, valid/)."""
    notes, lowered = [], [name.lower() for name in folders]
    for name in sorted(set(lowered)):
        same = [folder for folder in folders if folder.lower() == name]
        if len(same) > 1:
            notes.append(f"the split folders {' and '.join(same)} differ only in case: they "
                         "are separate splits; rename one to join them")
    validation = [folder for folder, low in zip(folders, lowered, strict=True)
                  if low in ("val", "valid", "validation", "dev")]
    if len({name.lower() for name in validation}) > 1:
        notes.append(f"the split folders {', '.join(validation)} all hold validation samples, "
                     "as separate splits; train fit validates on the first of val, valid, "
                     "validation, dev (or --val-split-name)")
    return notes


def _notes(entry: dict, options) -> list[str]:
    """What a reader of the splits should know: a split left empty, or windows that
    share records across splits."""
    total = sum(split["count"] for split in entry["sets"].values())
    notes = [f"split {name} holds no sample" + (
        f" (its share, {entry['ratios'][name]:g}, of {total:,} samples is under one)"
        if entry["ratios"] else "") for name, split in entry["sets"].items()
        if not split["count"]]
    window, stride = (getattr(options.source, name, None) for name in ("window", "stride"))
    if window and stride and stride < window:
        notes.append(f"windows of {window} records every {stride} overlap, so "
                     "neighbouring windows in two splits share records, which the leak check "
                     "(identical samples) does not see; --stride "
                     f"{window} or more keeps each record in one window")
    return notes

