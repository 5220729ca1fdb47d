"""Damaged samples reported once: during `fit`, what the decoders and the loader say of a
sample (the loader's "replaced by another sample", Pillow's warnings, libtiff's messages)
is kept, not printed; each epoch then prints one line and lists the samples, each once
with its reasons, in metrics.jsonl.

Every process that decodes (the training process, each DataLoader worker) records the
warnings it would print into a file of its own in a folder of the run (a file, not a
pipe, so that a worker never waits on a reader); the sample a warning is of is the one
the loader is decoding (the `raw` sample dict up its call stack). libtiff writes its
messages to the process's stderr from C, naming no file: its handlers are unset while
the run lasts (once per process, nothing per sample), and the decode errors it
reported reach the list as the loader's reasons.
"""

import ctypes
import ctypes.util
import json
import os
import re
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

import torch.distributed as dist

KEY = "__key__"
LOADER_MESSAGE = re.compile(r"^packer: sample .* failed \((?P<reason>.*)\); (?P<action>replaced "
                            r"by another sample|skipped) \(\d+ so far in this worker\)$", re.S)


class DamageLog:
    """The run's record of damaged samples; also the loader's worker_init_fn, which
    starts recording in each worker."""

    def __init__(self):
        self.folder = tempfile.mkdtemp(prefix="train-damaged-")
        self._restore = None

    def __call__(self, worker_id: int) -> None:
        _record_into(Path(self.folder))

    def __enter__(self) -> "DamageLog":
        self._restore = _record_into(Path(self.folder))
        return self

    def __exit__(self, *exc) -> None:
        self._restore()
        shutil.rmtree(self.folder, ignore_errors=True)

    def taken(self, world: int = 1) -> list[dict]:
        """The samples recorded since the last call, on every rank: {"key", "reasons",
        "replaced"} each, by key."""
        records = []
        for path in sorted(Path(self.folder).glob("*.jsonl")):
            text = path.read_text(encoding="utf-8")
            path.unlink()
            records += [json.loads(line) for line in text.splitlines() if line]
        if world > 1:
            every = [None] * world
            dist.all_gather_object(every, records)
            records = [record for rank in every for record in rank]
        return _by_key(records)


def _by_key(records: list[dict]) -> list[dict]:
    samples: dict = {}
    for record in records:
        sample = samples.setdefault(record["key"], {"key": record["key"], "reasons": [],
                                                    "replaced": False})
        if record["reason"] not in sample["reasons"]:
            sample["reasons"].append(record["reason"])
        sample["replaced"] |= record["replaced"]
    return list(samples.values())


def summary(samples: list[dict]) -> str | None:
    """The epoch's one line (None: no damaged sample)."""
    if not samples:
        return None
    replaced = sum(sample["replaced"] for sample in samples)
    what = "replaced this epoch" if replaced == len(samples) else \
        f"this epoch, {replaced} of them replaced by other samples"
    return f"{len(samples)} damaged sample{'s' if len(samples) > 1 else ''} {what}; listed " \
           "in metrics.jsonl"


def _record_into(folder: Path):
    """Record this process's decoder warnings into FOLDER/<pid>.jsonl from now on;
    returns what puts the previous handling back."""
    path = folder / f"{os.getpid()}.jsonl"
    shown = warnings.showwarning

    def record(message, category, filename, lineno, file=None, line=None):
        text = str(message)
        match = LOADER_MESSAGE.match(text)
        if match is None and f"{os.sep}PIL{os.sep}" not in filename:
            return shown(message, category, filename, lineno, file, line)
        entry = {"key": _sample_key(), "reason": match["reason"] if match else text,
                 "replaced": bool(match) and match["action"].startswith("replaced")}
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(entry) + "\n")
        return None

    filters = warnings.filters[:]
    warnings.filterwarnings("always", module="PIL")  # each sample's, not the first only
    warnings.filterwarnings("always", message="packer: sample")
    warnings.showwarning = record
    handlers = _libtiff_handlers(None)

    def restore():
        warnings.showwarning, warnings.filters[:] = shown, filters
        _libtiff_handlers(handlers)
    return restore


def _sample_key() -> str | None:
    """The key of the sample the loader is decoding (its `raw` dict up the stack)."""
    frame = sys._getframe(2)
    while frame is not None:
        raw = frame.f_locals.get("raw")
        if isinstance(raw, dict) and KEY in raw:
            return raw[KEY]
        frame = frame.f_back
    return None


_HANDLER = ctypes.c_void_p


def _libtiff_handlers(handlers):
    """Set libtiff's error and warning handlers (None: unset, so that it writes nothing
    to stderr); returns the ones they replace (None where Pillow has no libtiff)."""
    library = _libtiff()
    if library is None:
        return None
    errors, notes = handlers or (None, None)
    return (library.TIFFSetErrorHandler(errors), library.TIFFSetWarningHandler(notes))


def _libtiff():
    """The libtiff Pillow decodes with: its own copy (wheels), else the system's."""
    from PIL import Image

    bundled = sorted((Path(Image.__file__).parent.parent / "pillow.libs").glob("libtiff*.so*"))
    name = str(bundled[0]) if bundled else ctypes.util.find_library("tiff")
    if name is None:
        return None
    try:
        library = ctypes.CDLL(name)
    except OSError:
        return None
    for function in (library.TIFFSetErrorHandler, library.TIFFSetWarningHandler):
        function.restype, function.argtypes = _HANDLER, [_HANDLER]
    return library
