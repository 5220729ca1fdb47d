"""Batches straight from the samples as read, where decoding would change nothing.

Bytes read with `decode="raw"`, and stored pixels (`packer pack --encode raw`) read
without a resize, need no decoding: a batch is made from the samples as the reader
gives them, one list or one tensor per field, without a decoded copy of each sample
or torch's collate walking every one. Class ids stored as text (`cls` in a tar) become
ints as the decoder makes them. Where a batch's samples are not what the layout expects
(a field missing, a class id that is not a number, damaged pixels), the batch is
decoded sample by sample instead, so that `on_error` and the errors are as usual.
"""

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch

from packer.formats.msgpack_columns import Bins
from packer.formats.spans import Spans
from packer.read.collate import batch_buffer, pixel_batch
from packer.read.decode import IMAGE_FIELDS, field_kind, npy_array
from packer.sample import KEY, RAW_IMAGE_FIELD

LIST, CLASS, PIXELS = "list", "class", "pixels"  # how a field goes into the batch
_DECODED_KINDS = frozenset({"npy", "json", "txt"})  # fields the decoder changes


class Layout(NamedTuple):
    fields: dict[str, str]  # {field: how it goes into a batch}
    size: tuple[int, int] | None  # (height, width) stored pixels must have, if asked

    @property
    def in_place(self) -> str | None:
        """The field a reader may leave where it lies (a memoryview of its memory map
        until the reader closes): stored pixels, copied from there into their rows."""
        return next((name for name, how in self.fields.items() if how == PIXELS), None)


def layout(field_counts: dict[str, int], samples: int, mode: str,
         pixels_size: tuple[int, int] | None, arrays: bool) -> Layout | None:
    """How batches are made when every sample has every field and none needs decoding
    (in `mode`; stored pixels as arrays at their stored size with `arrays`); None
    otherwise."""
    if any(count != samples for count in field_counts.values()):
        return None
    fields = {KEY: LIST}
    for name in field_counts:
        kind = field_kind(name)
        if name == RAW_IMAGE_FIELD and mode == "rgb8" and arrays:
            fields[name] = PIXELS
        elif mode != "raw" and (name == RAW_IMAGE_FIELD or kind in IMAGE_FIELDS):
            return None
        elif kind == "cls":
            fields[name] = CLASS
        elif kind in _DECODED_KINDS:
            return None
        else:
            fields[name] = LIST
    return Layout(fields, pixels_size)


def batch(samples: list[dict], layout: Layout, decoded: Callable[[list[dict]], dict | None]):
    """The batch of `samples` as laid out; `decoded(samples)` where they differ from it."""
    try:
        if any(len(sample) != len(layout.fields) for sample in samples):
            raise KeyError("fields differ")
        return _laid_out([sample[KEY] for sample in samples],
                         lambda name: [sample[name] for sample in samples], layout)
    except (KeyError, ValueError, TypeError, IndexError):
        return decoded(samples)


def _laid_out(keys: list[str], values_of: Callable[[str], list | np.ndarray], layout: Layout,
              pixels_of: Callable[[str], torch.Tensor] | None = None) -> dict:
    """A batch from its keys and each field's values (`values_of(field)`), stored
    pixels by `pixels_of(field)` if given."""
    out: dict = {KEY: keys}
    for name, how in layout.fields.items():
        if name == KEY:
            continue
        if how == PIXELS and pixels_of is not None:
            out[name] = pixels_of(name)
            continue
        values = values_of(name)
        if isinstance(values, np.ndarray):  # ints, read as a column
            out[name] = torch.from_numpy(values)
        elif how == PIXELS:
            out[name] = _pixels(values, layout.size, name, keys)
        elif how == CLASS or type(values[0]) is int:
            out[name] = torch.tensor([int(value) for value in values])
        elif isinstance(values[0], Spans | bytes | str):  # Spans: bytes in a worker's slot
            out[name] = values
        else:  # floats, arrays ...: as torch's collate makes them
            raise TypeError(f"{name} holds {type(values[0]).__name__}")
    return out


# Batches from windows. A reader may give a window of samples as columns ({field:
# column}: a list, an array, Bins (packer.formats.msgpack_columns) or Spans of a
# buffer (packer.formats.spans));
# a batch then takes its samples' rows from each window's columns, field by field.

def window_batches(windows, size: int, drop_last: bool, make: Callable[[list], object]):
    """(batch, its count of samples) of `size` samples from `windows` ((columns or
    samples, the positions to emit in order), as plan.read_windows gives them), each
    made by `make(pieces)` from (window, positions) of each window it takes from."""
    pieces, filled = [], 0
    for window, positions in windows:
        positions, at = positions.tolist(), 0
        while at < len(positions):
            take = min(size - filled, len(positions) - at)
            pieces.append((window, positions[at:at + take]))
            filled, at = filled + take, at + take
            if filled == size:
                yield make(pieces), filled
                pieces, filled = [], 0
    if filled and not drop_last:
        yield make(pieces), filled


def pieces_batch(pieces: list, layout: Layout, decoded: Callable[[list[dict]], dict | None]):
    """The batch of `pieces` (window_batches) as laid out: from their columns where
    every window has them, with the fields laid out; else sample by sample (`batch`)."""
    if all(isinstance(window, dict) and window.keys() == layout.fields.keys()
           for window, _ in pieces):
        in_place = layout.in_place and all(isinstance(window[layout.in_place], Bins)
                                           for window, _ in pieces)
        try:
            return _laid_out([window[KEY][i] for window, at in pieces for i in at],
                             lambda name: _gathered(pieces, name), layout,
                             (lambda name: _column_pixels(pieces, name, layout.size))
                             if in_place else None)
        except (ValueError, TypeError, IndexError):
            pass
    return batch([_sample(window, i) for window, at in pieces for i in at], layout, decoded)


def _gathered(pieces: list, name: str) -> list | np.ndarray:
    columns = [window[name] for window, _ in pieces]
    if all(isinstance(column, np.ndarray) and column.ndim == 1 for column in columns):
        return np.concatenate([column[at] for column, (_, at) in zip(columns, pieces,
                                                                     strict=True)])
    if all(isinstance(column, Spans) for column in columns):  # where they lie, piece by piece
        return [Spans(column.buffer, column.starts[at], column.ends[at])
                for column, (_, at) in zip(columns, pieces, strict=True)]
    if all(isinstance(column, list) for column in columns):
        return [column[i] for column, (_, at) in zip(columns, pieces, strict=True) for i in at]
    # windows read apart (one into a slot, the next not, as no slot was free)
    return [_cell(column, i) for column, (_, at) in zip(columns, pieces, strict=True) for i in at]


def _sample(window: dict | list, i: int) -> dict:
    """Sample `i` of a window, as a reader would give it one by one."""
    if isinstance(window, list):
        return window[i]
    return {name: _cell(column, i) for name, column in window.items()}


def _cell(column, i: int):
    if isinstance(column, Bins):
        return column.head + column.rest(i).tobytes()
    if isinstance(column, Spans):
        return column.value(i)
    return int(column[i]) if isinstance(column, np.ndarray) else column[i]


def _column_pixels(pieces: list, name: str, size: tuple[int, int] | None) -> torch.Tensor:
    """Stored pixels of a batch from windows that hold their .npy files as Bins, as
    (B, 3, H, W): each row of the batch written once, straight from where it lies.
    The .npy files of a batch must have the first one's header (all of a column do)."""
    columns = [window[name] for window, _ in pieces]
    head = columns[0].head
    if any(not isinstance(column, Bins) or column.head != head for column in columns):
        raise ValueError("pixels stored in other layouts")
    first = npy_array(head + columns[0].rest(pieces[0][1][0]).tobytes())
    if first.dtype != np.uint8 or first.ndim != 3 or (size and first.shape[:2] != size) \
            or len(columns[0].rest(0)) != first.nbytes:
        raise ValueError("not uint8 (height, width, channels) pixels at the size asked")
    out = batch_buffer((sum(len(at) for _, at in pieces), *first.shape))
    rows, size, end = memoryview(out.numpy().reshape(-1)), first.nbytes, 0
    for column, (_, at) in zip(columns, pieces, strict=True):
        values, start = column.values, column.start
        for i in at:  # one copy each, nothing kept
            rows[end:end + size] = values[i][start:]
            end += size
    return out.permute(0, 3, 1, 2)


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
