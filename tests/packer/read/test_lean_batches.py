"""Batches made from the samples as read (bytes, stored pixels) and the workers' shared
batch buffers: the same batches as per-sample reads, however many are held."""

import time
import warnings

import lmdb
import msgpack
import numpy as np
import pytest
import torch

import packer
from conftest import image_bytes, run
from packer.formats import FORMAT_NAMES
from packer.read import ring
from packer.read.collate import collate_samples


@pytest.fixture(scope="module")
def packed(packed_images):
    """150 images, packed as they are and as raw 12x10 pixels, every format."""
    return packed_images((50, 50, 50), size=((10, 5), (9, 4)), max_count=40, raw="12x10")


def per_sample(ds, workers: int, batch_size: int) -> list[dict]:
    loader = torch.utils.data.DataLoader(ds, batch_size=batch_size, num_workers=workers,
                                         collate_fn=collate_samples)
    return list(loader)


def same_batch(ours: dict, theirs: dict) -> bool:
    if ours.keys() != theirs.keys():
        return False
    for name, value in ours.items():
        other = theirs[name]
        if isinstance(value, torch.Tensor):
            if not (isinstance(other, torch.Tensor) and value.dtype == other.dtype
                    and torch.equal(value, other)):
                return False
        elif list(value) != list(other):
            return False
    return True


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
@pytest.mark.parametrize("workers", [0, 2])
def test_bytes_batches_equal_per_sample_reads(packed, fmt, workers):
    ds = packer.open_dataset(packed[fmt, "jpg"], shuffle=True, seed=4, decode="raw")
    ours = list(packer.DataLoader(ds, batch_size=16, num_workers=workers))
    theirs = per_sample(ds, workers, 16)
    assert len(ours) == len(theirs)
    assert all(same_batch(a, b) for a, b in zip(ours, theirs, strict=True))
    assert ours[0]["cls"].dtype == torch.int64 and isinstance(ours[0]["jpg"][0], bytes)


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
@pytest.mark.parametrize("workers", [0, 2])
def test_pixel_batches_equal_per_sample_reads(packed, fmt, workers):
    """Stored pixels (read in place from LMDB's map): the same batches, the last and
    short one of each worker too, made after the reader has read its last sample."""
    ds = packer.open_dataset(packed[fmt, "raw"], shuffle=True, seed=5)
    ours = list(packer.DataLoader(ds, batch_size=16, num_workers=workers))
    theirs = per_sample(ds, workers, 16)
    assert len(ours[-1]["__key__"]) < 16 and len(ours) == len(theirs)
    assert all(same_batch(a, b) for a, b in zip(ours, theirs, strict=True))


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


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_more_batches_held_than_a_worker_has_buffers(packed, fmt):
    """Every batch kept (more than the slots of each worker): none is overwritten."""
    ds = packer.open_dataset(packed[fmt, "raw"], shuffle=True, seed=2)
    ours = list(packer.DataLoader(ds, batch_size=2, num_workers=2))
    assert len(ours) > 2 * ring.SLOTS
    theirs = per_sample(ds, 2, 2)
    assert all(same_batch(a, b) for a, b in zip(ours, theirs, strict=True))


def test_buffers_are_reused_and_a_view_kept_stays_intact(packed):
    ds = packer.open_dataset(packed["lmdb", "raw"], shuffle=True, seed=7)
    expected = per_sample(ds, 2, 2)
    kept, pointers = [], set()
    for number, batch in enumerate(packer.DataLoader(ds, batch_size=2, num_workers=2)):
        assert same_batch(batch, expected[number])
        pointers.add(batch["rgb.npy"].untyped_storage().data_ptr())
        if number % 9 == 0:  # one image of the batch, a view of the worker's buffer
            kept.append((number, batch["rgb.npy"][0]))
    assert len(pointers) <= 2 * ring.SLOTS < len(expected)  # buffers were used again
    for number, image in kept:
        assert torch.equal(image, expected[number]["rgb.npy"][0])


def test_persistent_workers_read_every_epoch_alike(packed):
    ds = packer.open_dataset(packed["hdf5", "raw"], shuffle=True, seed=3)
    loader = packer.DataLoader(ds, batch_size=8, num_workers=2, persistent_workers=True)
    for epoch in range(3):
        ds.set_epoch(epoch)
        ours = list(loader)
        assert all(same_batch(a, b) for a, b in zip(ours, per_sample(ds, 2, 8), strict=True))


def _damage_pixels(folder, index: int, how: str = "garbage") -> str:
    """Replace the stored pixels of sample `index` of an LMDB raw dataset with garbage,
    or (`how="header"`) change the shape its .npy header says to one that still parses
    but leaves most of its bytes unaccounted for."""
    env = lmdb.open(str(folder), subdir=True)
    with env.begin(write=True) as txn:
        key = b"%010d" % index
        sample = msgpack.unpackb(txn.get(key))
        if how == "header":
            assert b"(10, 12, 3)" in sample["rgb.npy"]
            sample["rgb.npy"] = sample["rgb.npy"].replace(b"(10, 12, 3)", b"(10,  3, 3)")
        else:
            sample["rgb.npy"] = b"not an array"
        txn.put(key, msgpack.packb(sample, use_bin_type=True))
    env.close()
    return sample["__key__"]


@pytest.mark.parametrize("how", ["garbage", "header"])
@pytest.mark.parametrize("on_error", ["warn", "skip", "raise"])
def test_damaged_pixels_in_a_batch_follow_on_error(packed, tmp_path, on_error, how):
    import shutil

    folder = tmp_path / "damaged"
    shutil.copytree(packed["lmdb", "raw"], folder)
    bad = _damage_pixels(folder, 5, how)
    ds = packer.open_dataset(folder, on_error=on_error)
    loader = packer.DataLoader(ds, batch_size=8, num_workers=0)
    if on_error == "raise":
        with pytest.raises(Exception, match="rgb.npy|array|pickle|header|damaged"):
            list(loader)
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batches = list(loader)
    keys = [key for batch in batches for key in batch["__key__"]]
    assert bad not in keys and any(bad in str(w.message) for w in caught)
    assert len(keys) == (150 if on_error == "warn" else 149)
    good = np.concatenate([b["rgb.npy"].numpy() for b in batches])
    assert good.shape == (len(keys), 3, 10, 12)


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


def test_a_loader_read_inside_another_ones_epoch_leaves_its_batches_intact(packed):
    """A validation pass in the middle of a training epoch: the training workers that
    have handed over all they read and exited still have batches on their way."""
    train_ds = packer.open_dataset(packed["lmdb", "raw"], shuffle=True, seed=2)
    expected = per_sample(train_ds, 2, 16)
    for steps in (1, 2, 3):
        batches = iter(packer.DataLoader(train_ds, batch_size=16, num_workers=2))
        got = [next(batches) for _ in range(steps)]
        deadline = time.monotonic() + 3  # until a training worker has exited
        while time.monotonic() < deadline and all(
                ring._alive(pid) for pid in ring.LANDING.pids.values()):
            time.sleep(0.05)
        val = packer.open_dataset(packed["hdf5", "raw"])
        assert sum(len(b["cls"]) for b in packer.DataLoader(val, batch_size=16,
                                                             num_workers=2)) == 150
        got += list(batches)
        assert all(same_batch(a, b) for a, b in zip(got, expected, strict=True))


@pytest.mark.parametrize("fmt", ["webdataset", "lmdb"])
def test_a_batch_moved_to_shared_memory_leaves_later_batches_intact(packed, fmt):
    """share_memory_() (what torch does to a tensor put on a multiprocessing queue)
    moves a batch's storage away from its worker's slot."""
    ds = packer.open_dataset(packed[fmt, "jpg"], shuffle=True, seed=4, image_size=64)
    expected = per_sample(ds, 2, 7)  # batches of 86 KB: in the workers' slots
    wrong = 0
    for number, batch in enumerate(packer.DataLoader(ds, batch_size=7, num_workers=2)):
        wrong += not same_batch(batch, expected[number])
        batch[ds.image_field].share_memory_()
    assert number + 1 == len(expected) and wrong == 0


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_batches_put_on_a_torch_queue_stay_as_they_were(packed, context):
    """A batch put on a torch.multiprocessing queue travels as its memory: spawned
    workers' slots are shared files, which torch passes as they are, and their next
    batches overwrote what the queue held. (Each batch is copied before it is put:
    the queue's feeder thread moves a tensor's storage into shared memory while the
    program goes on, and a read of the tensor meanwhile can see freed memory; plain
    torch tensors do the same.)"""
    import torch.multiprocessing as mp

    ds = packer.open_dataset(packed["lmdb", "jpg"], shuffle=True, seed=4, image_size=64)
    queue, kept = mp.get_context(context).Queue(), []  # batches of 86 KB: in the slots
    loader = packer.DataLoader(ds, batch_size=7, num_workers=2, multiprocessing_context=context)
    for batch in loader:
        kept.append(batch[ds.image_field].clone())
        queue.put(batch[ds.image_field])
    came = [queue.get(timeout=60) for _ in kept]
    assert sum(not torch.equal(a, b) for a, b in zip(came, kept, strict=True)) == 0


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
