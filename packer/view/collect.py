"""The facts of a `packer view` page, gathered in one pass through the loader: every
sample read (up to `max_samples`, in a seeded random order) gives its class, bytes,
payload digest and image size and brightness; N samples per class are kept whole."""

import hashlib
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
from tqdm import tqdm

from packer.read.decode import is_image_field
from packer.sample import KEY
from packer.view.images import image_facts

LABEL = "cls"
FIRST_RECORDS = 200  # the records of a binary dataset that its plot shows


@dataclass
class SampleFacts:
    """What one sample read tells the page (a few numbers, never its payload)."""

    key: str
    label: int | None
    bytes: int
    digest: str
    width: int | None = None
    height: int | None = None
    brightness: float | None = None  # mean grey level, 0..255
    spread: int | None = None  # brightest minus darkest grey level


@dataclass
class Facts:
    """Everything read from the data (the manifest is kept beside it by the caller)."""

    total: int  # samples in the dataset
    samples: list[SampleFacts] = field(default_factory=list)
    kept: dict[int | None, list[dict]] = field(default_factory=dict)  # class -> samples
    first: list[dict] = field(default_factory=list)  # the first records, in order
    features: list[np.ndarray] = field(default_factory=list)  # table rows read

    @property
    def read(self) -> int:
        return len(self.samples)

    def class_counts(self) -> Counter:
        return Counter(s.label for s in self.samples)


def collect(dataset, manifest: dict, per_class: int, max_samples: int | None, seed: int,
            progress: bool, cache_dir=None, cache_limit=None) -> Facts:
    """Read `dataset` through the loader (raw bytes, shuffled by `seed`): at most
    `max_samples` samples, each summed up; `per_class` of each class kept at random."""
    from packer.read.loader import open_dataset

    stream = open_dataset(dataset, shuffle=True, seed=seed, decode="raw",
                          cache_dir=cache_dir, cache_limit=cache_limit)
    facts = Facts(total=len(stream))
    wanted = facts.total if max_samples is None else min(max_samples, facts.total)
    keeper = _Reservoirs(per_class, seed)
    table = (manifest.get("source") or {}).get("kind") == "table"
    with tqdm(total=wanted, desc="reading", unit=" samples", disable=not progress) as bar:
        for sample in stream:
            if facts.read >= wanted:
                break
            facts.samples.append(sample_facts(sample))
            keeper.offer(sample, facts.samples[-1].label)
            if table and "npy" in sample:
                facts.features.append(_array(sample["npy"]))
            bar.update()
    facts.kept = keeper.kept()
    if (manifest.get("source") or {}).get("kind") == "binary":
        facts.first = first_records(dataset, cache_dir, cache_limit)
    return facts


def first_records(dataset, cache_dir=None, cache_limit=None) -> list[dict]:
    """The first samples of a dataset in stored order (the start of a binary dump)."""
    from packer.read.loader import open_dataset

    stream = open_dataset(dataset, decode="raw", cache_dir=cache_dir, cache_limit=cache_limit)
    records = []
    for sample in stream:
        records.append(sample)
        if len(records) >= FIRST_RECORDS:
            break
    return records


def sample_facts(sample: dict) -> SampleFacts:
    """The numbers one sample gives: its size, the digest of its payload (its image where
    it has one, so that the same image under two labels is found whatever sidecars it
    has; else every field but the key and the label), and an image's size and
    brightness."""
    payloads = {name: payload_bytes(value) for name, value in sample.items()
                if name not in (KEY, LABEL)}
    image = image_payload(sample)
    digest = hashlib.blake2b(digest_size=16)
    for name, payload in sorted(payloads.items()) if image is None else [image]:
        digest.update(f"{len(name)}:{name}:{len(payload)}:".encode() if image is None else b"")
        digest.update(payload)
    label = sample.get(LABEL)
    facts = SampleFacts(key=sample[KEY], label=None if label is None else int(label),
                        bytes=sum(map(len, payloads.values())), digest=digest.hexdigest())
    if image is not None:
        found = image_facts(*image)
        if found is not None:
            facts.width, facts.height, facts.brightness, facts.spread = found
    return facts


def image_payload(sample: dict) -> tuple[str, bytes] | None:
    """(field, bytes) of the sample's image, if it has one."""
    for name, value in sample.items():
        if (name == "image" or is_image_field(name)) and isinstance(value, bytes | bytearray):
            return name, bytes(value)
    return None


def payload_bytes(value) -> bytes:
    """A field's value as bytes, whatever the loader made of it (raw bytes, an array,
    a parsed JSON object, text)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if hasattr(value, "numpy") or isinstance(value, np.ndarray):
        return _array(value).tobytes()
    return repr(value).encode()


def _array(value) -> np.ndarray:
    return value.numpy() if hasattr(value, "numpy") else np.asarray(value)


class _Reservoirs:
    """Up to N samples of each class, each sample seen equally likely to be kept
    (reservoir sampling, seeded)."""

    def __init__(self, size: int, seed: int):
        self.size, self.rng = size, np.random.default_rng(seed)
        self.seen: Counter = Counter()
        self.samples: dict[int | None, list[dict]] = {}

    def offer(self, sample: dict, label: int | None) -> None:
        self.seen[label] += 1
        kept = self.samples.setdefault(label, [])
        if len(kept) < self.size:
            kept.append(sample)
        else:
            slot = int(self.rng.integers(self.seen[label]))
            if slot < self.size:
                kept[slot] = sample

    def kept(self) -> dict[int | None, list[dict]]:
        return {label: sorted(samples, key=lambda s: s[KEY])
                for label, samples in sorted(self.samples.items(),
                                             key=lambda item: (item[0] is None, item[0] or 0))}
