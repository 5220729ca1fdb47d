"""Batches made from the samples as read (bytes, stored pixels) and the workers' shared
batch buffers: the same batches as per-sample reads, however many are held."""

import time
import warnings

import lmdb
import msgpack
import numpy as np
import pytest
import torch
from batch_checks import per_sample, same_batch

import packer
from packer.formats import FORMAT_NAMES
from packer.read import ring


@pytest.fixture(scope="module")
def packed(packed_images):
    """150 images, packed as they are and as raw 12x10 pixels, every format."""
    return packed_images((50, 50, 50), size=((10, 5), (9, 4)), max_count=40, raw="12x10")


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
