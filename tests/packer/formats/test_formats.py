"""Every format stores bytes, class ids and fixed-shape arrays, and reads them back."""

import json

import numpy as np
import pytest

from packer.formats import FORMAT_NAMES, format_module
from packer.formats.base import encode_chunk
from packer.read.decode import Decoder
from packer.sample import field_bytes

FIELDS = {"bin": {"dtype": "bytes"}, "cls": {"dtype": "int64"},
          "npy": {"dtype": "float32", "shape": [4, 3]}}


def samples(count):
    rng = np.random.default_rng(0)
    return [{"__key__": f"k{i:04d}", "bin": bytes([i % 256]) * (1 + i % 7), "cls": i % 3,
             "npy": rng.standard_normal((4, 3)).astype(np.float32)} for i in range(count)]


def write(fmt, folder, items):
    module = format_module(fmt)
    setup = {"fields": FIELDS, "classes": ["a", "b", "c"], "input_bytes": 0}
    writer = module.WRITER(folder, setup, 1 << 30, 50)
    chunk, stored = encode_chunk([(s, []) for s in items], module), 0
    while (stored := writer.add_chunk(chunk, stored)) < len(items):
        pass
    writer.close_part()
    manifest = {"format": fmt, "count": writer.count, "parts": writer.parts,
                "fields": FIELDS, "classes": setup["classes"]}
    writer.finish(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return module, manifest


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_arrays_bytes_and_ids_round_trip(fmt, tmp_path):
    items = samples(120)
    module, manifest = write(fmt, tmp_path, items)
    assert [p["count"] for p in manifest["parts"]] == [50, 50, 20]
    back = [s for part in manifest["parts"] for s in module.read_part(tmp_path, manifest, part)]
    decoder = Decoder("raw")
    for original, read in zip(items, back, strict=True):
        assert read["__key__"] == original["__key__"] and read["bin"] == original["bin"]
        assert int(decoder.field("cls", read["cls"])) == original["cls"]
        assert np.array_equal(decoder.field("npy", read["npy"]).numpy(), original["npy"])
        assert field_bytes(read["npy"]) == field_bytes(original["npy"])


def test_hdf5_stores_arrays_as_one_numeric_dataset(tmp_path):
    import h5py

    write("hdf5", tmp_path, samples(30))
    with h5py.File(tmp_path / "data.h5") as file:
        assert file["npy"].shape == (30, 4, 3) and file["npy"].dtype == np.float32
        assert file["cls"][:5].tolist() == [0, 1, 2, 0, 1]
