"""Batches straight from the samples as read, where decoding would change nothing.

Bytes read with `decode="raw"`, and stored pixels (`packer pack --encode raw`) read
without a resize, need no decoding: a batch is made from the samples as the reader
gives them, one list or one tensor per field, without a decoded copy of each sample
or torch's collate walking every one. Class ids stored as text (`cls` in a tar) become
ints as the decoder makes them. Where a batch's samples are not what the plan expects
(a field missing, a class id that is not a number, damaged pixels), the batch is
decoded sample by sample instead, so that `on_error` and the errors are as usual.
"""

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch

from packer.read.batches import batch_buffer, pixel_batch
from packer.read.decode import IMAGE_FIELDS, field_kind, npy_array
from packer.sample import KEY, RAW_IMAGE_FIELD

LIST, CLASS, PIXELS = "list", "class", "pixels"  # how a field goes into the batch
_DECODED_KINDS = frozenset({"npy", "json", "txt"})  # fields the decoder changes


class Plan(NamedTuple):
    fields: dict[str, str]  # {field: how it goes into a batch}
    size: tuple[int, int] | None  # (height, width) stored pixels must have, if asked

    @property
    def in_place(self) -> str | None:
        """The field a reader may leave where it lies (a memoryview of its memory map
        until the reader closes): stored pixels, copied from there into their rows."""
        return next((name for name, how in self.fields.items() if how == PIXELS), None)


def plan(field_counts: dict[str, int], samples: int, mode: str,
         pixels_size: tuple[int, int] | None, arrays: bool) -> Plan | None:
    """How batches are made when every sample has every field and none needs decoding
    (in `mode`; stored pixels as arrays at their stored size with `arrays`); None
    otherwise."""
    if any(count != samples for count in field_counts.values()):
        return None
    lean = {KEY: LIST}
    for name in field_counts:
        kind = field_kind(name)
        if name == RAW_IMAGE_FIELD and mode == "rgb8" and arrays:
            lean[name] = PIXELS
        elif mode != "raw" and (name == RAW_IMAGE_FIELD or kind in IMAGE_FIELDS):
            return None
        elif kind == "cls":
            lean[name] = CLASS
        elif kind in _DECODED_KINDS:
            return None
        else:
            lean[name] = LIST
    return Plan(lean, pixels_size)


def batch(samples: list[dict], lean: Plan, decoded: Callable[[list[dict]], dict | None]):
    """The batch of `samples` as planned; `decoded(samples)` where they differ from it."""
    try:
        return _planned(samples, lean)
    except (KeyError, ValueError, TypeError, IndexError):
        return decoded(samples)


def _planned(samples: list[dict], lean: Plan) -> dict:
    width = len(lean.fields)
    if any(len(sample) != width for sample in samples):
        raise KeyError("fields differ")
    keys = [sample[KEY] for sample in samples]
    out: dict = {KEY: keys}
    for name, how in lean.fields.items():
        if name == KEY:
            continue
        values = [sample[name] for sample in samples]
        if how == PIXELS:
            out[name] = _pixels(values, lean.size, name, keys)
        elif how == CLASS or type(values[0]) is int:
            out[name] = torch.tensor([int(value) for value in values])
        elif isinstance(values[0], bytes | str):
            out[name] = values
        else:  # floats, arrays ...: as torch's collate makes them
            raise TypeError(f"{name} holds {type(values[0]).__name__}")
    return out


def _pixels(values: list, size: tuple[int, int] | None, name: str, keys: list[str]):
    """Stored pixels of a batch (.npy bytes or memoryviews of them, or arrays) as one
    (B, 3, H, W) uint8 tensor. The .npy files of a batch must have the first one's
    header: each one's pixels are then copied straight into its row of the batch."""
    first = npy_array(values[0])
    if first.dtype != np.uint8 or first.ndim != 3 or (size and first.shape[:2] != size):
        raise ValueError("not uint8 (height, width, channels) pixels at the size asked")
    if isinstance(values[0], np.ndarray):
        return pixel_batch([npy_array(value) for value in values], name, keys)
    length, pixels = len(values[0]), first.nbytes
    header = bytes(values[0][:length - pixels])
    if any(len(value) != length or value[:length - pixels] != header for value in values):
        raise ValueError("pixels stored in other layouts")
    out = batch_buffer((len(values), *first.shape))
    rows = memoryview(out.numpy()).cast("B")
    for at, value in zip(range(0, len(values) * pixels, pixels), values, strict=True):
        rows[at:at + pixels] = memoryview(value)[length - pixels:]
    return out.permute(0, 3, 1, 2)
