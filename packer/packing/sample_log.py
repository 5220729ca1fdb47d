"""What a pack keeps of every stored sample when it makes splits or drops duplicates
(`--split`, split folders, `--dedupe`): its key, class id and content digest
(packer.sample.content_digest, computed by the packing workers).

The entries of each closed part go to a file of their own in `OUT.partial/samples/`, as
durable as the part, so a resumed pack has those of the parts it keeps and memory holds
one part's at a time; the log is read whole once, to make the splits, and removed
before the dataset is published.
"""

import json
import shutil
from pathlib import Path

from packer.errors import UsageProblem
from packer.formats.base import Chunk
from packer.sample import KEY, content_digest, restored_path

LOG_NAME = "samples"


class SampleLog:
    def __init__(self, work: Path, dedupe: bool):
        self.folder = work / LOG_NAME
        self.dedupe = dedupe
        self.pending: list[tuple[str, int | None, bytes]] = []  # stored, part not closed
        self.first_key: dict[bytes, tuple] = {}  # content -> (key, label) kept (--dedupe)

    def resume(self, parts: list[dict]) -> None:
        """Keep the entries of the closed `parts` an interrupted run left (none: start over)."""
        kept = {self._file(part["index"]).name for part in parts}
        self.folder.mkdir(exist_ok=True)
        for stale in self.folder.iterdir():
            if stale.name not in kept:
                stale.unlink()
        for part in parts:  # each checked now, not after the rest is packed
            keys, labels, contents = self._read(part)
            if self.dedupe:
                for key, label, content in zip(keys, labels, contents, strict=True):
                    self.first_key.setdefault(content, (key, label))

    def admit(self, chunk: Chunk) -> Chunk:
        """The chunk to store: with --dedupe, less the samples whose content is already
        stored (each listed as skipped, naming the key it duplicates); its entries kept
        until their part closes."""
        contents = [chunk.contents[i:i + 32] for i in range(0, len(chunk.contents), 32)]
        if self.dedupe:
            dropped = {}
            for i, (key, content) in enumerate(zip(chunk.keys, contents, strict=True)):
                first, label = self.first_key.setdefault(content, (key, chunk.labels[i]))
                if first != key:
                    other = "" if label == chunk.labels[i] else ", which has another label"
                    dropped[i] = [{"path": restored_path(key, name), "reason":
                                   f"an exact duplicate of {restored_path(first, name)}"
                                   f"{other} (--dedupe)"} for name, _ in chunk.field_sizes[i]
                                  if name != "cls"]
            if dropped:
                chunk = chunk.without(dropped)
                contents = [c for i, c in enumerate(contents) if i not in dropped]
        self.pending += zip(chunk.keys, chunk.labels, contents, strict=True)
        return chunk

    def part_closed(self, part: dict) -> None:
        """Write the entries of a part as it closes (they are the first pending)."""
        entries, self.pending = self.pending[:part["count"]], self.pending[part["count"]:]
        keys, labels, contents = zip(*entries, strict=True) if entries else ((), (), ())
        with open(self._file(part["index"]), "w", encoding="utf-8") as file:
            json.dump({"keys": keys, "labels": labels,
                       "contents": b"".join(contents).hex()}, file)

    def entries(self, parts: list[dict]) -> tuple[list[str], list, list[bytes]]:
        """(keys, class ids, contents) of every stored sample, in order."""
        keys, labels, contents = [], [], []
        for part_keys, part_labels, part_contents in map(self._read, parts):
            keys += part_keys
            labels += part_labels
            contents += part_contents
        return keys, labels, contents

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def _file(self, index: int) -> Path:
        return self.folder / f"part-{index:06d}.json"

    def _read(self, part: dict) -> tuple[list[str], list, list[bytes]]:
        path = self._file(part["index"])
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            keys, labels, data = record["keys"], record["labels"], bytes.fromhex(
                record["contents"])
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise UsageProblem(f"{path}: the log of the samples of part {part['index']} is "
                               f"missing or damaged ({err}), so the splits or --dedupe cannot "
                               "go on from this interrupted pack; start over with "
                               "--overwrite") from None
        if not len(keys) == len(labels) == len(data) // 32 == part["count"]:
            raise UsageProblem(f"{path}: the log holds {len(keys):,} samples, the part "
                               f"{part['count']:,}; start over with --overwrite")
        return keys, labels, [data[i:i + 32] for i in range(0, len(data), 32)]


def sample_facts(outcomes: list[tuple[dict | None, list]]) -> tuple[tuple, bytes]:
    """(keys, content digests) of the read samples among `outcomes` (run in the workers)."""
    samples = [sample for sample, _ in outcomes if sample is not None]
    return (tuple(sample[KEY] for sample in samples),
            b"".join(content_digest(sample) for sample in samples))
