"""Every field of a sample as the detail view of a `packer view` page shows it: the
image at full size, JSON pretty-printed, text, arrays by shape and small statistics
(a long signal as a waveform, a table row as a table of its columns), other bytes by
size and first bytes."""

import json

import numpy as np

from packer.read.decode import field_kind, is_image_field, npy_array
from packer.sample import KEY
from packer.view.collect import LABEL
from packer.view.images import full_uri
from packer.view.plots import waveform

TEXT_LIMIT = 20_000  # characters of a text or JSON field shown
SIGNAL = 1000  # a 1-D array (or frames x up to 8 channels) this long is drawn as a waveform
SHOWN_VALUES = 16  # an array this small is shown value by value


def shown_fields(sample: dict, columns: list[str] | None) -> list[dict]:
    """[{name, kind, ...}] for every field but the key and the label, in name order.
    `columns` names a table row's features."""
    return [_shown(name, sample[name], columns) for name in sorted(sample)
            if name not in (KEY, LABEL)]


def _shown(name: str, value, columns: list[str] | None) -> dict:
    if (name == "image" or is_image_field(name)) and isinstance(value, bytes | bytearray):
        uri = full_uri(name, bytes(value))
        if uri is not None:
            return {"name": name, "kind": "image", "uri": uri}
        return {"name": name, "kind": "text", "text": f"{len(value):,} bytes that do not "
                "open as an image"}
    if isinstance(value, dict | list) or field_kind(name) == "json":
        return {"name": name, "kind": "text", "text": _limited(_json_text(value))}
    if isinstance(value, str) or field_kind(name) == "txt":
        text = value if isinstance(value, str) else bytes(value).decode("utf-8", "replace")
        return {"name": name, "kind": "text", "text": _limited(text)}
    array = _as_array(name, value)
    if array is not None:
        return _array_field(name, array, columns)
    data = bytes(value) if isinstance(value, bytes | bytearray | memoryview) else repr(value)
    return {"name": name, "kind": "text",
            "text": f"{len(data):,} bytes, starting {bytes(data[:32]).hex(' ')}"
            if isinstance(data, bytes) else data}


def _json_text(value) -> str:
    if isinstance(value, bytes | bytearray):
        try:
            value = json.loads(value)
        except ValueError:
            return bytes(value).decode("utf-8", "replace")
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _limited(text: str) -> str:
    if len(text) <= TEXT_LIMIT:
        return text
    return f"{text[:TEXT_LIMIT]}\n… ({len(text) - TEXT_LIMIT:,} more characters)"


def _as_array(name: str, value) -> np.ndarray | None:
    if hasattr(value, "numpy"):
        return value.numpy()
    if isinstance(value, np.ndarray | int | float):
        return np.asarray(value)
    if field_kind(name) == "npy" and isinstance(value, bytes | bytearray):
        try:
            return npy_array(bytes(value))
        except ValueError:
            return None
    return None


def _array_field(name: str, array: np.ndarray, columns: list[str] | None) -> dict:
    shown = {"name": name, "kind": "array", "shape": "×".join(map(str, array.shape)) or
             "scalar", "dtype": str(array.dtype), "stats": array_stats(array),
             "table": None, "plot": None, "numbers": None}
    if columns and array.ndim == 1 and len(columns) == len(array):
        shown["table"] = list(zip(columns, array.tolist(), strict=True))
    elif _is_signal(array):
        shown["plot"] = waveform(array)
    elif array.size <= SHOWN_VALUES:
        shown["numbers"] = np.array2string(array, precision=4, separator=", ")
    return shown


def _is_signal(array: np.ndarray) -> bool:
    return (array.dtype.kind in "iuf" and len(array.shape) in (1, 2) and len(array) >= SIGNAL
            and (array.ndim == 1 or array.shape[1] <= 8))


def array_stats(array: np.ndarray) -> str:
    """min, max, mean and standard deviation of a numeric array; '' otherwise."""
    if array.dtype.kind not in "iufb" or array.size == 0:
        return ""
    values = array.astype(np.float64)
    finite = values[np.isfinite(values)]
    if not finite.size:
        return "no finite values"
    nonfinite = values.size - finite.size
    return (f"min {finite.min():.4g}, max {finite.max():.4g}, mean {finite.mean():.4g}, "
            f"std {finite.std():.4g}" + (f", {nonfinite:,} not finite" if nonfinite else ""))
