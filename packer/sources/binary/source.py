"""The `binary` source: raw dumps described by a spec file (see packer/sources/binary).

Two shapes of input:

- one dump (`packer pack imu.bin --spec imu.toml`): a sample is one record, or a
  window of records (`--window 256 --stride 128`). Each record field becomes a
  field `NAME.npy` in its own type and native byte order: `accel` of shape [3]
  gives `accel.npy` of shape (3,), or (256, 3) per window. `--label-field F` takes
  the class from a record field (a window's class is that of its last record);
  class ids are the field's distinct values in sorted order.
- a folder of small binary files (`packer pack ./wavs --spec pcm16.toml`): a
  sample is one file, its records as `NAME.npy` arrays of any length; classes come
  from the folder layout or `--labels`, as for the files source, and a file that
  does not fit the spec is skipped with the reason.

Samples of a dump are read a range at a time (`np.fromfile`). A format that takes
RECORDS (HDF5) gets the dump's records copied whole (`records_layout`, `write_records`),
each once even where windows overlap; no Python loop runs per record.
"""

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from packer.compressed import PlainFile
from packer.errors import PackerError, UsageProblem
from packer.sample import (
    KEY,
    RECORDS,
    SAMPLES,
    SIDECAR_FIELDS,
    column_samples,
    field_bytes,
    index_keys,
)
from packer.sources.base import Source
from packer.sources.binary.dump import open_dump
from packer.sources.binary.records import Windows, record_arrays, window_arrays
from packer.sources.binary.spec import load_spec
from packer.sources.files.read import read_file


class BinaryDump(Source):
    """One dump as records or windows; picklable (the dump is reopened per job)."""

    kind = "binary"

    @property
    def SHAPES(self) -> tuple[str, ...]:  # noqa: N802 (the protocol's name)
        # 24-bit fields are widened when read, so the records are not copied as they are
        widened = any(f.widened for f in self.spec.record.fields)
        return (SAMPLES,) if widened else (RECORDS, SAMPLES)

    def __init__(self, path: Path, spec: str, options):
        """`options`: a BinaryOptions (packer/sources/binary/options.py)."""
        self.path, self.spec_name = Path(path), spec
        self.tail, self.label_field = options.tail, options.label_field
        self.spec = load_spec(spec)
        self.plain = PlainFile(self.path)  # a compressed dump, decompressed once for all jobs
        self.dump = open_dump(self.path, self.spec, self.tail, self.plain)
        self.spec = self.dump.spec  # a chunked file's (WAV, AIFF) own layout
        if not self.dump.count:
            layout = next(c.message for c in self.dump.checks if c.name == "records")
            raise PackerError(f"{self.path}: nothing to pack, the dump holds no records "
                              f"({layout})")
        self.windows = (Windows(self.dump.count, options.window, options.stride or options.window)
                        if options.window else self._whole_file())
        self.count = self.windows.count if self.windows else self.dump.count
        if options.window and not self.count:
            raise UsageProblem(f"{self.path}: {self.dump.count:,} records make no window of "
                               f"{options.window:,}")
        self._check_label_field()
        self.labels_path = str(options.labels) if options.labels else None
        self.record_labels = (_labels_file(options.labels, options.label_spec, self.dump.count)
                              if options.labels else None)
        self.values = self._label_values()
        self.classes = [str(v) for v in self.values] if self.values is not None else None
        self.label_source = ("record-field" if self.label_field else
                             "labels-file" if options.labels else "none")
        self.input_bytes = self.dump.count * self.spec.record.size
        self.scan_skipped: list[dict] = []
        stat = self.path.stat()
        self.fingerprint = hashlib.sha256(json.dumps(
            [str(self.path.resolve()), stat.st_size, stat.st_mtime_ns, repr(self.spec)]
        ).encode()).hexdigest()

    def _whole_file(self) -> Windows | None:
        """One window of every record where the spec describes a whole file (sample =
        "file": a WAV, a scan), so that one file is one sample, as in a folder of them."""
        if self.spec.sample != "file":
            return None
        return Windows(self.dump.count, self.dump.count, self.dump.count)

    def _check_label_field(self) -> None:
        if self.label_field is None:
            return
        fields = {f.name: f for f in self.spec.record.fields if f.kind != "pad"}
        if self.label_field not in fields:
            raise UsageProblem(f"--label-field {self.label_field}: the spec's record fields "
                               f"are {', '.join(fields)}")
        field = fields[self.label_field]
        if field.shape:  # an array, bytesN, or i3/u3
            numbers = [name for name, f in fields.items() if not f.shape]
            shape = list(field.spec_shape) if field.spec_shape else ""
            raise UsageProblem(f"--label-field {self.label_field}: a label is one number per "
                               f"record, but {field.key} is {field.type}{shape}; the one-number "
                               f"fields are {', '.join(numbers) or 'none'}")

    @property
    def field_specs(self) -> dict[str, dict]:
        window = [self.windows.size] if self.windows else []
        specs = {f"{f.name}.npy": {"dtype": f.value_dtype.name,
                                   "shape": window + list(f.spec_shape)}
                 for f in self.spec.record.fields
                 if f.kind != "pad" and f.name != self.label_field}
        if self.values is not None:
            specs["cls"] = {"dtype": "int64"}
        return specs

    def _label_values(self) -> np.ndarray | None:
        """The distinct labels in sorted order: class i is the i-th."""
        if self.record_labels is not None:
            return np.unique(self.record_labels)
        if self.label_field is None:
            return None
        seen = [np.unique(chunk[self.label_field]) for chunk in self.dump.chunks()]
        return np.unique(np.concatenate(seen))

    def columns(self, first: int, count: int) -> dict[str, np.ndarray]:
        """Samples first..first+count-1 as {field: (count, *shape)} arrays."""
        if self.windows:
            arrays = window_arrays(self.dump, self.windows, first, count)
        else:
            arrays = record_arrays(self.dump.records(first, count), self.spec)
        columns = {f"{name}.npy": values for name, values in arrays.items()
                   if name != self.label_field}
        if self.values is not None:
            columns["cls"] = self.sample_labels(first, count, arrays)
        return columns

    def sample_labels(self, first: int, count: int, arrays: dict | None = None) -> np.ndarray:
        """The class ids of samples first..first+count-1: of their record, or of a
        window's last record. `arrays`: the samples' fields, where already read."""
        size, stride = (self.windows.size, self.windows.stride) if self.windows else (1, 1)
        last = first * stride + size - 1
        stop = last + (count - 1) * stride + 1
        if self.label_field is not None and arrays is not None:
            labels = arrays[self.label_field]
            labels = labels[:, -1] if self.windows else labels
        elif self.label_field is not None:
            labels = self.dump.records(last, stop - last)[self.label_field][::stride]
        else:
            labels = self.record_labels[last:stop:stride]
        return np.searchsorted(self.values, labels)

    def records_layout(self) -> dict:
        """The dump as RECORDS: every record once, in one compound dataset (the
        record's fields at their offsets, in native byte order); sample i is record i,
        or records i*stride .. i*stride+window-1. Members name the fields' records."""
        return {"dataset": "records", "records": self.dump.count, "samples": self.count,
                "window": self.windows.size if self.windows else None,
                "stride": self.windows.stride if self.windows else None,
                "members": {f"{f.name}.npy": f.name for f in self.spec.record.fields
                            if f.kind != "pad" and f.name != self.label_field}}

    @property
    def record_dtype(self) -> np.dtype:
        return self.spec.record_dtype.newbyteorder("=")

    def write_records(self, start: int, stop: int, fd: int, offset: int) -> int:
        """Records start..stop-1 into `fd` at `offset`; their CRC-32 (Dump.write_records)."""
        return self.dump.write_records(start, stop, fd, offset)

    def values_crc32(self, start: int, stop: int) -> int:
        """The CRC-32 of records start..stop-1's values (Dump.values_crc32)."""
        return self.dump.values_crc32(start, stop)

    def jobs(self, start: int, size: int, check: str) -> Iterator[tuple]:
        for first in range(start, self.count, size):
            yield self, first, min(size, self.count - first)

    def keys(self, first: int, count: int) -> list[str]:
        return index_keys(first, count)

    def source_record(self, options) -> dict:
        dump = self.dump
        return {"source": {
            "kind": "binary", "path": str(self.path.resolve()), "spec": str(self.spec.source),
            "compression": self.plain.compression,
            "byte_order": dump.byte_order, "header": _plain(dump.header),
            "records": dump.count, "record_size": self.spec.record.size,
            "trailing_bytes": dump.trailing, "window": self.windows.size if self.windows else None,
            "stride": self.windows.stride if self.windows else None,
            "labels": self.label_source, "label_field": self.label_field,
            "labels_file": self.labels_path,
            "samples": self.count, "bytes": self.input_bytes}}

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "dump"}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.dump = open_dump(self.path, self.spec, self.tail, self.plain)


def _labels_file(path: Path, label_spec: str | None, records: int) -> np.ndarray:
    """One label per record: the first field of a binary labels file read with
    `label_spec`, or one label per line of a text file."""
    if label_spec:
        spec = load_spec(label_spec)
        field = next(f.name for f in spec.record.fields if f.kind != "pad")
        labels = record_arrays(open_dump(path, spec).records(), spec)[field]
    else:
        try:
            labels = np.array(Path(path).read_text(encoding="utf-8").split())
        except (OSError, UnicodeDecodeError) as err:
            raise PackerError(f"{path}: cannot read the labels: {err}") from None
    if len(labels) != records:
        raise PackerError(f"{path}: {len(labels):,} labels for {records:,} records; give one "
                          "label per record")
    return labels


def _plain(header: dict) -> dict:
    """Header values as JSON can hold them."""
    return {name: value.decode("latin-1") if isinstance(value, bytes) else
            value.tolist() if isinstance(value, np.ndarray) else value
            for name, value in header.items()}


def read_job(job: tuple) -> list[tuple[dict, list]]:
    """Samples of a dump as dicts of arrays (the SAMPLES shape)."""
    source, first, count = job
    return column_samples(index_keys(first, count), source.columns(first, count))


class BinaryFolder:
    """A folder of small binary files, one sample each; the files source scans it."""

    kind = "binary-files"

    def __init__(self, path: Path, spec: str, options):
        """`options`: a BinaryOptions, whose folder options scan the folder."""
        self.spec, self.tail = load_spec(spec), options.tail
        self.scan = options.scan(path)
        names = self.spec.field_names
        self.field_specs = {f"{name}.npy": {"dtype": "bytes"} for name in names}
        if self.spec.container:
            self.field_specs[AUDIO_FIELD] = {"dtype": "bytes"}
        self.sample_rates = self._sample_rates(options.tail) if self.spec.container else None
        self.field_specs.update({f: {"dtype": "bytes"} for f in sorted(self.scan.fields)
                                 if f.lower() in SIDECAR_FIELDS})
        if self.scan.label_source != "none":
            self.field_specs["cls"] = {"dtype": "int64"}

    def __getattr__(self, name):  # count, classes, fingerprint, ... are the scan's
        if name == "scan":
            raise AttributeError(name)
        return getattr(self.scan, name)

    def _sample_rates(self, tail) -> dict[str, int]:
        """How many sounds have each sample rate (their headers only are read): a dataset
        of mixed rates is said to be one in the pack summary."""
        rates: dict[str, int] = {}
        for sample in self.scan.samples():
            for field, rel in sample.files:
                if field.lower() in SIDECAR_FIELDS:
                    continue
                try:
                    rate = audio_header(open_dump(self.scan.root / rel, self.spec, tail),
                                        self.spec.container)
                except PackerError:
                    continue  # skipped with its reason when it is read
                key = f"{rate['sample_rate']:g}" if rate["sample_rate"] else "unknown"
                rates[key] = rates.get(key, 0) + 1
        return rates

    def jobs(self, start: int, size: int, check: str) -> Iterator[tuple]:
        for root, _, sources in self.scan.jobs(start, size, check):
            yield root, self.spec, self.tail, sources

    def source_record(self, options) -> dict:
        self.scan.input_bytes = sum(os.stat(self.scan.root / rel).st_size
                                    for sample in self.scan.samples()
                                    for _, rel in sample.files)
        record = self.scan.source_record(options)
        record["source"].update(kind="binary-files", spec=str(self.spec.source))
        if self.sample_rates is not None:
            record["source"]["sample_rates"] = self.sample_rates
        return record


def file_fields(path: Path, spec, tail) -> dict[str, bytes]:
    """The fields of one binary file read with `spec`: each record field as `NAME.npy`
    (all the file's records), and for a sound (a chunked spec: WAV, AIFF) its header as
    `audio.json`, so that no file's rate or format is lost."""
    dump = open_dump(path, spec, tail)
    arrays = record_arrays(dump.records(), dump.spec)  # a chunked file's own spec
    fields = {f"{name}.npy": field_bytes(values) for name, values in arrays.items()}
    if spec.container:
        fields[AUDIO_FIELD] = json.dumps(audio_header(dump, spec.container)).encode()
    return fields


AUDIO_FIELD = "audio.json"


def audio_header(dump, container: str) -> dict:
    """A sound's rate, channels, bits and sample format, from its header (`container`:
    the spec's, riff or aiff; the file's own layout, read from its chunks, has none)."""
    header, kind = dump.header, dump.spec.record.fields[0].element.kind
    return {"sample_rate": float(header["sample_rate"]) if "sample_rate" in header else None,
            "channels": int(header["num_channels"]),
            "bits": int(header.get("bits_per_sample") or header.get("sample_size") or 0),
            "format": "float" if kind == "f" else "pcm", "container": container}


def read_folder_job(job: tuple) -> list[tuple[dict | None, list]]:
    root, spec, tail, sources = job
    out = []
    for key, files_of_sample, label in sources:
        sample = {KEY: key}
        for field_name, rel_path in files_of_sample:
            if field_name.lower() in SIDECAR_FIELDS:  # notes beside a file: as bytes
                sample[field_name] = read_file(f"{root}/{rel_path}")
                continue
            try:
                sample.update(file_fields(Path(root) / rel_path, spec, tail))
            except PackerError as err:
                out.append((None, [{"path": rel_path, "reason": str(err).split(": ", 1)[-1]}]))
                break
        else:
            if label is not None:
                sample["cls"] = label
            out.append((sample, []))
    return out

