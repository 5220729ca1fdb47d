"""The leak check of `packer verify` on a dataset with splits: the content of every sample
read (packer.sample.content_digest), and each content found in two splits, with its keys.
It rides along the verify's own read of every sample, as a comparer does."""

import numpy as np

from packer.sample import KEY, content_digest


class LeakCheck:
    """A comparer (`check(sample)`, `unaccounted(manifest)`) that notes each sample's
    content and split, then passes the sample on to `compare` (--against), if given.
    `at(first)`: the index of the next sample read (a part begins)."""

    def __init__(self, manifest: dict, compare=None):
        self.compare = compare
        self.names = list(manifest["splits"]["sets"])
        self.split_of = np.full(manifest["count"], -1, np.int64)
        for number, entry in enumerate(manifest["splits"]["sets"].values()):
            for first, stop in entry["ranges"]:
                self.split_of[first:stop] = number
        self.index = 0
        self.found: dict[bytes, dict[int, list[str]]] = {}  # content -> split -> keys

    def at(self, first: int) -> None:
        self.index = first

    def check(self, sample: dict) -> list[str]:
        if self.index < len(self.split_of) and self.split_of[self.index] >= 0:
            splits = self.found.setdefault(content_digest(sample), {})
            splits.setdefault(int(self.split_of[self.index]), []).append(sample[KEY])
        self.index += 1
        return self.compare.check(sample) if self.compare else []

    def unaccounted(self, manifest: dict) -> list[str]:
        return self.compare.unaccounted(manifest) if self.compare else []

    def leaks(self) -> list[dict]:
        """Each content in two splits or more: {"sha256", "keys": {split: [key, ...]}}."""
        return sorted(({"sha256": content.hex(),
                        "keys": {self.names[number]: keys for number, keys in splits.items()}}
                       for content, splits in self.found.items() if len(splits) > 1),
                      key=lambda leak: sorted(leak["keys"].values()))
