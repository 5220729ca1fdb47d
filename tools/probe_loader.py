"""The reading side's and the transform's probes of tools/probe_faults.py (`--loader N`):

- slots: N epochs of `packer.DataLoader` with fork and with spawn workers, each batch
  copied, then put on a `torch.multiprocessing` queue and read back after the epoch;
  right when every batch read back equals its copy and the reference read
  (num_workers=0), silent otherwise;
- transform: a file in every extension Pillow writes, packed with `--resize 16x16`;
  right when the stored image is 16x16 (or, for a format packer does not take for an
  image, such as PDF or EPS, the file is stored bit for bit), clear when the file is
  listed as skipped with its reason, silent otherwise.
"""

import io
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import torch
import torch.multiprocessing as mp
from PIL import Image

import packer
from packer.read.collate import collate_samples
from packer.sample import PIL_FORMATS

SIDE = 16


def probe_loader(work: Path, images: Path, tries: int) -> dict[str, Counter]:
    packed = work / "loader-lmdb"
    if not packed.exists():
        _pack(images, packed, "--to", "lmdb", "--max-count", "200")
    slots = Counter()
    for context in ("fork", "spawn"):
        for epoch in range(tries):
            slots[_slots_once(packed, context, epoch)] += 1
            print(f"slots {context} {epoch + 1}/{tries}: {dict(slots)}", file=sys.stderr)
    return {"slots": slots, "transform": _transform(work)}


def _pack(source: Path, out: Path, *options) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "packer", "pack", str(source), "-o", str(out),
                           "-q", *options], capture_output=True, text=True, timeout=600)


def _slots_once(packed: Path, context: str, epoch: int) -> str:
    ds = packer.open_dataset(packed, shuffle=True, seed=epoch, image_size=64)
    ds.set_epoch(epoch)
    # torch's own loader over the same samples: the batches as they should be
    reference = [b[ds.image_field] for b in torch.utils.data.DataLoader(
        ds, batch_size=7, num_workers=2, collate_fn=collate_samples)]
    queue, kept = mp.get_context(context).Queue(), []
    loader = packer.DataLoader(ds, batch_size=7, num_workers=2, multiprocessing_context=context)
    for batch in loader:
        kept.append(batch[ds.image_field].clone())
        queue.put(batch[ds.image_field])
    came = [queue.get(timeout=120) for _ in kept]
    same = len(kept) == len(reference) and all(
        torch.equal(a, b) and torch.equal(b, c)
        for a, b, c in zip(came, kept, reference, strict=True))
    return "right" if same else "silent"


def _transform(work: Path) -> Counter:
    folder = work / "extensions" / "c0"
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for extension, fmt in sorted(Image.registered_extensions().items()):
        if fmt not in Image.SAVE:
            continue
        try:
            data = _encoded(fmt)
        except (OSError, ValueError, KeyError):
            continue  # Pillow registers it but cannot write this picture in it
        name = f"probe_{extension[1:]}{extension}"  # one stem each: one sample each
        (folder / name).write_bytes(data)
        written.append(name)
    out = work / "extensions-packed"
    done = _pack(folder.parent, out, "--resize", f"{SIDE}x{SIDE}", "--overwrite")
    outcomes = Counter()
    if done.returncode != 0:
        outcomes["clear" if "Traceback" not in done.stderr else "traceback"] += len(written)
        return outcomes
    manifest = json.loads((out / "manifest.json").read_text())
    skipped = {Path(s.get("path", "")).name for s in manifest.get("skipped", []) if s.get("reason")}
    stored = {}
    for sample in packer.iter_samples(out):
        for name, value in sample.items():
            if isinstance(value, bytes) and name != "__key__":
                stored[sample["__key__"].split("/")[-1]] = value
    for name in written:
        value = stored.get(Path(name).stem)
        as_file = Path(name).suffix[1:] not in PIL_FORMATS  # not an image to packer
        if name in skipped:
            outcomes["clear"] += 1
        elif value is not None and (value == (folder / name).read_bytes() if as_file
                                    else _side(value) == (SIDE, SIDE)):
            outcomes["right"] += 1
        else:
            outcomes["silent"] += 1
    return outcomes


def _encoded(fmt: str) -> bytes:
    rng = np.random.default_rng(0)
    picture = Image.fromarray(rng.integers(0, 255, (40, 48, 3), dtype=np.uint8))
    if fmt in ("ICO", "ICNS"):
        picture = picture.resize((32, 32))
    out = io.BytesIO()
    picture.save(out, format=fmt)
    return out.getvalue()


def _side(value: bytes) -> tuple[int, int] | None:
    try:
        with Image.open(io.BytesIO(value)) as image:
            return image.size
    except OSError:
        return None
