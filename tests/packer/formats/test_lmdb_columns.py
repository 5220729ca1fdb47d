"""LMDB values read where they lie and a window at a time as columns (the lmdb reader,
packer.formats.msgpack_columns): the batches are the per-sample ones, values of other
layouts and damaged values fall back to decoding one by one, and what was read does not
stay mapped."""

import lmdb
import msgpack
import numpy as np
import pytest
from batch_checks import per_sample, same_batch

import packer
from conftest import image_bytes, run


@pytest.fixture(scope="module")
def packed(packed_images):
    """150 images, packed as they are and as raw 12x10 pixels, every format."""
    return packed_images((50, 50, 50), size=((10, 5), (9, 4)), max_count=40, raw="12x10")


def _rewrite(folder, change) -> None:
    """Every value of an LMDB dataset as `change(index, sample)` makes it (a new map)."""
    env = lmdb.open(str(folder), subdir=True)
    with env.begin(write=True) as txn:
        for key, value in list(txn.cursor()):
            if key != b"__meta__":
                sample = change(int(key), msgpack.unpackb(value))
                txn.put(key, msgpack.packb(sample, use_bin_type=True))
    env.close()


def test_lmdb_values_in_other_layouts_read_as_packed(packed, tmp_path):
    """Values whose pixels are not last (as packed before they were put last), or
    with a longer key before them, read as they decode."""
    import shutil

    folder = tmp_path / "layouts"
    shutil.copytree(packed["lmdb", "raw"], folder)

    def change(index, sample):
        if index % 3 == 0:  # pixels first
            return {"rgb.npy": sample.pop("rgb.npy"), **sample}
        if index % 3 == 1:
            sample["__key__"] += "-" + "x" * (index % 40)
        return sample
    _rewrite(folder, change)
    for workers in (0, 2):
        ds = packer.open_dataset(folder, shuffle=True, seed=1)
        ours = list(packer.DataLoader(ds, batch_size=8, num_workers=workers))
        theirs = per_sample(ds, workers, 8)
        assert all(same_batch(a, b) for a, b in zip(ours, theirs, strict=True))
        assert any("-x" in key for batch in ours for key in batch["__key__"])


def test_lmdb_in_place_decoding_of_one_value():
    from packer.formats.lmdb import InPlace, encode

    pixels = np.arange(48, dtype=np.uint8).reshape(4, 4, 3)
    first = encode({"__key__": "a", "rgb.npy": pixels, "cls": 2})[0]
    in_place = InPlace("rgb.npy", first)
    sample = in_place(memoryview(first))
    assert isinstance(sample["rgb.npy"], memoryview)
    assert sample.keys() == {"__key__", "rgb.npy", "cls"} and sample["cls"] == 2
    assert bytes(sample["rgb.npy"]) == msgpack.unpackb(first)["rgb.npy"]
    other = msgpack.packb({"rgb.npy": b"x" * 200, "__key__": "b"}, use_bin_type=True)
    assert in_place(memoryview(other)) == {"rgb.npy": b"x" * 200, "__key__": "b"}
    with pytest.raises(ValueError):
        in_place(memoryview(first[:-7]))


def _mapped_kb(name: str) -> int:
    """Resident KB of this process's mappings of files called `name`."""
    total, inside = 0, False
    for line in open("/proc/self/smaps").read().splitlines():
        fields = line.split()
        if "-" in fields[0] and len(fields) >= 5:
            inside = len(fields) >= 6 and fields[-1].endswith("/" + name)
        elif inside and fields[0] == "Rss:":
            total += int(fields[1])
    return total


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/smaps"), reason="Linux")
def test_an_lmdb_reader_does_not_keep_what_it_has_read_mapped(tmp_path):
    images = tmp_path / "images" / "c"
    images.mkdir(parents=True)
    for i in range(200):
        (images / f"{i:03d}.png").write_bytes(image_bytes(i, fmt="PNG", size=(64, 64)))
    run("pack", tmp_path / "images", "--to", "lmdb", "-o", tmp_path / "raw", "--encode", "raw",
        "-q")
    size_kb = (tmp_path / "raw" / "data.mdb").stat().st_size // 1024
    # what was read in place stays mapped for two windows of 16 samples, not longer
    ds = packer.open_dataset(tmp_path / "raw", shuffle=True, shuffle_buffer=16)
    most, shapes = 0, set()
    for batch in packer.DataLoader(ds, batch_size=8):
        most = max(most, _mapped_kb("data.mdb"))
        shapes.add(tuple(batch["rgb.npy"].shape[1:]))
    assert shapes == {(3, 64, 64)}
    assert size_kb > 2000 and most < size_kb / 2


def test_lmdb_windows_of_one_layout_are_read_as_columns(packed, tmp_path):
    """A raw LMDB pack is read a window at a time as columns (no dict per sample),
    class ids above 127 too (msgpack's uint 8); the batches are the per-sample ones."""
    import shutil

    from packer.formats.msgpack_columns import Bins
    from packer.read import plan

    ds = packer.open_dataset(packed["lmdb", "raw"])
    reader = ds.source.reader()
    runs = ds._runs(0, 1)
    window = reader.read_window(next(plan.windows(runs, 64)), "rgb.npy")
    assert isinstance(window, dict) and isinstance(window["rgb.npy"], Bins)
    assert window["__key__"][:2] == [s["__key__"] for s in reader.read(0, 0, 2)]
    reader.close()

    folder = tmp_path / "classes"
    shutil.copytree(packed["lmdb", "raw"], folder)
    _rewrite(folder, lambda index, sample: {**sample, "cls": 200 + sample["cls"]})
    for workers in (0, 2):
        ds = packer.open_dataset(folder, shuffle=True, seed=3)
        ours = list(packer.DataLoader(ds, batch_size=8, num_workers=workers))
        theirs = per_sample(ds, workers, 8)
        assert all(same_batch(a, b) for a, b in zip(ours, theirs, strict=True))
        assert {int(c) for batch in ours for c in batch["cls"]} == {200, 201, 202}


def test_msgpack_columns_refuse_values_of_another_layout():
    from packer.formats import msgpack_columns
    from packer.sample import npy_header_size

    def value(key: str, cls: int, pixels: bytes = b"\x07" * 12) -> bytes:
        npy = b"\x93NUMPY\x01\x00\x06\x00" + b"{}    " + pixels
        return msgpack.packb({"__key__": key, "cls": cls, "rgb.npy": npy}, use_bin_type=True)

    values = [value(f"k{i:02d}", i % 4) for i in range(20)]
    layout = msgpack_columns.layout(values[0], "rgb.npy", npy_header_size)
    columns = msgpack_columns.columns([memoryview(v) for v in values], layout)
    assert columns["__key__"] == [f"k{i:02d}" for i in range(20)]
    assert columns["cls"].tolist() == [i % 4 for i in range(20)]
    assert bytes(columns["rgb.npy"].rest(5)) == b"\x07" * 12
    assert columns["rgb.npy"].head == b"\x93NUMPY\x01\x00\x06\x00{}    "
    odd = {"longer key": value("k100", 1), "class id of two bytes": value("k05", 300)[:-1],
           "a class id's byte flipped": _flipped(values[5], values[5].index(b"cls") + 3),
           "a name's byte flipped": _flipped(values[5], 3),
           "another .npy header": value("k05", 1).replace(b"{}  ", b"{ } "),
           "a key that is not UTF-8": values[5].replace(b"k05", b"k\xff5")}
    for name, other in odd.items():
        assert msgpack_columns.columns(values[:5] + [other] + values[6:], layout) is None, name
    assert msgpack_columns.layout(msgpack.packb({"a": 1.5, "rgb.npy": b"x"}), "rgb.npy") is None
    assert msgpack_columns.layout(msgpack.packb({"rgb.npy": b"x", "a": 1}), "rgb.npy") is None


def test_msgpack_columns_make_no_object_per_value():
    """Columns of a window keep its values but make nothing for each one that Python's
    collector would have to walk: thousands of objects a window made it walk every
    object of the program (torch's too) about once an epoch."""
    import gc

    from packer.formats import msgpack_columns
    from packer.sample import npy_header_size

    values = [memoryview(msgpack.packb({"__key__": f"k{i:04d}", "cls": i % 7,
                                        "rgb.npy": b"\x93NUMPY" + bytes(40)},
                                       use_bin_type=True)) for i in range(2000)]
    layout = msgpack_columns.layout(values[0], "rgb.npy", npy_header_size)
    gc.collect()
    gc.disable()
    try:
        before = len(gc.get_objects())
        columns = msgpack_columns.columns(values, layout)
        made = len(gc.get_objects()) - before
    finally:
        gc.enable()
    assert columns["cls"].tolist()[:8] == [0, 1, 2, 3, 4, 5, 6, 0]
    assert made < 20, f"{made} objects for the collector, for {len(values)} values"


def _flipped(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x80]) + data[at + 1:]


def test_a_damaged_value_in_a_window_of_columns_is_named(packed, tmp_path):
    """A value of a raw LMDB pack whose map header is damaged leaves its window to be
    decoded value by value, which names its key."""
    import shutil

    folder = tmp_path / "damaged"
    shutil.copytree(packed["lmdb", "raw"], folder)
    data = bytearray((folder / "data.mdb").read_bytes())
    env = lmdb.open(str(packed["lmdb", "raw"]), readonly=True, lock=False)
    with env.begin() as txn:
        at = data.index(txn.get(b"0000000007"))
    env.close()
    data[at + 1] = 0xC1  # the first entry's name: a byte msgpack never writes
    (folder / "data.mdb").write_bytes(bytes(data))
    for workers in (0, 2):
        ds = packer.open_dataset(folder, on_error="raise")
        with pytest.raises(packer.read.loader.DatasetError, match="key 0000000007 is damaged"):
            list(packer.DataLoader(ds, batch_size=8, num_workers=workers))


def test_a_failing_run_of_a_window_is_named_by_its_own_samples(packed, monkeypatch):
    """The runs of a shuffled window lie apart: LMDB's error in one names that run's
    samples, not a range from the window's first sample."""
    from packer.formats import lmdb as lmdb_format
    from packer.read import plan

    ds = packer.open_dataset(packed["lmdb", "raw"])
    reader = ds.source.reader()
    runs = [plan.Segment(0, 0, 8), plan.Segment(0, 100, 8)]
    first_of_second = reader.firsts[0] + 100
    real = lmdb_format.Reader._values

    def values(self, txn, first, count):
        if first == first_of_second:
            raise lmdb.CorruptedError("MDB_CORRUPTED: Located page was wrong type")
        return real(self, txn, first, count)

    monkeypatch.setattr(lmdb_format.Reader, "_values", values)
    with pytest.raises(packer.read.loader.DatasetError,
                       match=f"samples {first_of_second:,} to {first_of_second + 7:,}"):
        reader.read_window(runs, "rgb.npy")
    reader.close()


def test_datasets_over_one_lmdb_are_read_at_once_in_one_process(packed):
    """python-lmdb opens a path once per process: a split and its holdout, or a
    validation loader inside a training epoch, share the environment."""
    path = packed["lmdb", "raw"]
    train = packer.open_dataset(path, holdout=(0.2, "train"))
    val = packer.open_dataset(path, holdout=(0.2, "val"))
    assert sum(1 for _ in zip(train, val, strict=False)) == 30
    batches = iter(packer.DataLoader(train, batch_size=8, num_workers=0))
    seen = len(next(batches)["cls"])
    for workers in (0, 2):
        loader = packer.DataLoader(packer.open_dataset(path, holdout=(0.2, "val")),
                                   batch_size=8, num_workers=workers)
        assert sum(len(batch["cls"]) for batch in loader) == 30
    assert seen + sum(len(batch["cls"]) for batch in batches) == 120
