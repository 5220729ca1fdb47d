"""Batches made in the workers (or threads) equal batches of per-sample reads."""

import io
import threading
import warnings

import numpy as np
import pytest
import torch
from PIL import Image

import packer
from conftest import image_bytes, run
from packer.formats import FORMAT_NAMES
from packer.read.collate import collate_samples
from packer.read.pixels import rgb8_tensor


@pytest.fixture(scope="module")
def packed(packed_images):
    """43 images of several sizes, packed as they are and as raw pixels, every format."""
    return packed_images((14, 15, 14), size=((10, 4), (8, 3)), max_count=16, raw="12x10")


def per_sample_batches(ds, workers: int, batch_size: int, drop_last: bool = False):
    """Batches as torch makes them: per-sample objects cross, collated after."""
    loader = torch.utils.data.DataLoader(ds, batch_size=batch_size, num_workers=workers,
                                         collate_fn=collate_samples, drop_last=drop_last)
    return list(loader)


def assert_same(ours: list[dict], theirs: list[dict], field: str):
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        assert a["__key__"] == b["__key__"]
        assert torch.equal(a["cls"], b["cls"])
        assert a[field].shape == b[field].shape and torch.equal(a[field], b[field])


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
@pytest.mark.parametrize("variant", ["jpg", "raw"])
@pytest.mark.parametrize("workers", [0, 1, 2])
def test_batches_equal_per_sample_reads(packed, fmt, variant, workers):
    ds = packer.open_dataset(packed[fmt, variant], shuffle=True, seed=3, image_size=(10, 12))
    ours = list(packer.DataLoader(ds, batch_size=8, num_workers=workers))
    theirs = per_sample_batches(ds, workers, 8)
    assert_same(ours, theirs, ds.image_field)
    keys = [k for batch in ours for k in batch["__key__"]]
    assert sorted(keys) == sorted(s["__key__"] for s in packer.iter_samples(packed[fmt, variant]))
    assert ours[0][ds.image_field].dtype == torch.uint8
    assert ours[0][ds.image_field].shape[1:] == (3, 10, 12)


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_raw_pixels_at_their_stored_size_and_resized(packed, fmt):
    path = packed[fmt, "raw"]
    stored = {s["__key__"]: np.load(io.BytesIO(s["rgb.npy"])) if isinstance(s["rgb.npy"], bytes)
              else s["rgb.npy"] for s in packer.iter_samples(path)}
    for batch in packer.DataLoader(packer.open_dataset(path), batch_size=7, num_workers=2):
        for key, pixels in zip(batch["__key__"], batch["rgb.npy"], strict=True):
            assert np.array_equal(pixels.permute(1, 2, 0).numpy(), stored[key])
    smaller = packer.open_dataset(path, image_size=6)
    ours = list(packer.DataLoader(smaller, batch_size=7, num_workers=1))
    assert_same(ours, per_sample_batches(smaller, 1, 7), "rgb.npy")
    assert ours[0]["rgb.npy"].shape == (7, 3, 6, 6)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true")
def test_drop_last_and_len_count_the_batches_given(packed, workers):
    ds = packer.open_dataset(packed["lmdb", "raw"])
    loader = packer.DataLoader(ds, batch_size=5, num_workers=workers, drop_last=True)
    ours = list(loader)
    assert len(ours) == len(loader) and all(len(b["__key__"]) == 5 for b in ours)
    assert_same(ours, per_sample_batches(ds, workers, 5, drop_last=True), "rgb.npy")
    assert packer.DataLoader(ds, batch_size=5).batch_size == 5
    pinned = list(packer.DataLoader(ds, batch_size=5, num_workers=workers, drop_last=True,
                                    pin_memory=True))  # pinned where an accelerator is
    assert_same(pinned, ours, "rgb.npy")


def test_resume_mid_epoch_with_batches_from_the_workers(packed):
    ds = packer.open_dataset(packed["hdf5", "raw"], shuffle=True, seed=1)
    loader = packer.DataLoader(ds, batch_size=4, num_workers=2)
    seen = []
    for number, batch in enumerate(loader):
        seen += batch["__key__"]
        if number == 2:
            state = ds.state_dict()
            break
    again = packer.open_dataset(packed["hdf5", "raw"], shuffle=True, seed=1)
    again.load_state_dict(state)
    rest = [k for b in packer.DataLoader(again, batch_size=4, num_workers=2)
            for k in b["__key__"]]
    assert sorted(seen + rest) == sorted(s["__key__"] for s in
                                         packer.iter_samples(packed["hdf5", "raw"]))


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_threads_decode_the_same_samples_in_the_same_order(packed, fmt):
    for variant in ("jpg", "raw"):
        plain = packer.open_dataset(packed[fmt, variant], shuffle=True, seed=5, image_size=8)
        threaded = packer.open_dataset(packed[fmt, variant], shuffle=True, seed=5, image_size=8,
                                       threads=3)
        for ours, theirs in zip(list(threaded), list(plain), strict=True):
            assert ours["__key__"] == theirs["__key__"]
            assert torch.equal(ours[threaded.image_field], theirs[plain.image_field])
        assert_same(list(packer.DataLoader(threaded, batch_size=6)),
                    list(packer.DataLoader(plain, batch_size=6)), plain.image_field)


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_stored_pixels_resized_in_batches_use_the_threads(packed, fmt, monkeypatch):
    from packer.read import decode

    resized_in, resize = set(), decode.resized_tensor

    def watched(*args, **kwargs):
        resized_in.add(threading.current_thread().name.partition("_")[0])
        return resize(*args, **kwargs)

    monkeypatch.setattr(decode, "resized_tensor", watched)
    threaded = packer.open_dataset(packed[fmt, "raw"], shuffle=True, seed=5, image_size=8,
                                   threads=2)
    plain = packer.open_dataset(packed[fmt, "raw"], shuffle=True, seed=5, image_size=8)
    assert_same(list(packer.DataLoader(threaded, batch_size=6)),
                list(packer.DataLoader(plain, batch_size=6)), plain.image_field)
    assert "packer-decode" in resized_in


def test_a_corrupt_sample_in_threads_is_replaced_and_counted(tmp_path):
    images = tmp_path / "images" / "c"
    images.mkdir(parents=True)
    for i in range(12):
        (images / f"{i:02d}.jpg").write_bytes(image_bytes(i))
    (images / "05.jpg").write_bytes(b"\xff\xd8\xff" + bytes(100) + b"\xff\xd9")
    run("pack", tmp_path / "images", "--to", "lmdb", "-o", tmp_path / "out", "--check", "none",
        "-q")
    ds = packer.open_dataset(tmp_path / "out", image_size=8, threads=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batches = list(packer.DataLoader(ds, batch_size=5))
    assert sum(len(b["__key__"]) for b in batches) == 12
    assert "c/05" not in [k for b in batches for k in b["__key__"]]
    assert ds.errors == 1 and any("c/05" in str(w.message) for w in caught)
    with pytest.raises(Exception, match="cannot identify|truncated|broken"):
        list(packer.open_dataset(tmp_path / "out", image_size=8, threads=2, on_error="raise"))


def test_reduced_scale_decode_stays_close_and_exact_resize_turns_it_off(tmp_path):
    """A JPEG at least twice the target is decoded at a reduced scale: the result stays
    within the documented difference of the full decode; exact_resize=True gives the
    full decode's pixels."""
    rng = np.random.default_rng(0)
    smooth = np.clip(rng.normal(128, 40, (20, 30, 3)), 0, 255).astype(np.uint8)
    big = Image.fromarray(smooth).resize((160, 120), Image.BICUBIC)
    out = io.BytesIO()
    big.save(out, "JPEG", quality=90)
    data = out.getvalue()
    full = rgb8_tensor(data, (32, 32), "jpg", reduced=False).int()
    reduced = rgb8_tensor(data, (32, 32), "jpg", reduced=True).int()
    assert not torch.equal(full, reduced)  # decoded at 1/2: 80x60, not 160x120
    assert (full - reduced).abs().float().mean() < 2 and (full - reduced).abs().max() <= 96
    folder = tmp_path / "images" / "c"
    folder.mkdir(parents=True)
    (folder / "big.jpg").write_bytes(data)
    run("pack", tmp_path / "images", "-o", tmp_path / "out", "-q")
    exact = next(iter(packer.open_dataset(tmp_path / "out", image_size=32, exact_resize=True)))
    assert torch.equal(exact["jpg"].int(), full)
