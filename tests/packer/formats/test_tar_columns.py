"""Tar shards read a window at a time as columns (keys, class ids, bytes), without a
dict per sample, where every sample has the same members; other shards sample by
sample, with the same batches and the same errors."""

import io
import json
import os
import shutil
import tarfile

import numpy as np
import pytest
import torch

import packer
from conftest import class_images, image_bytes, run
from packer.errors import DatasetError
from packer.formats.spans import Spans
from packer.read import plan, ring
from packer.read.collate import collate_samples


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("tarcolumns")
    run("pack", class_images(root / "images", 3, 40), "--to", "webdataset", "-o", root / "wds",
        "--max-count", "50", "-q")
    return root / "wds"


def foreign(folder, samples: list[list[tuple[str, bytes]]]):
    """A dataset of one shard written by another tool, with `samples` (member lists)."""
    folder.mkdir()
    with tarfile.open(folder / "shard-000000.tar", "w") as tar:
        for members in samples:
            for name, data in members:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    count = len(samples)
    manifest = {"format": "webdataset", "layout_version": 2, "count": count, "tool": "packer",
                "created": "2026-12-01T00:00:00+00:00",
                "fields": {"jpg": {"dtype": "bytes", "count": count, "bytes": 1},
                           "cls": {"dtype": "int64", "count": count, "bytes": 0}},
                "classes": None, "parts": [{"index": 0, "first": 0, "count": count,
                                            "bytes": (folder / "shard-000000.tar").stat().st_size,
                                            "name": "shard-000000.tar", "sha256": "0" * 64}],
                "source": {"kind": "files", "path": "x", "labels": "none"},
                "skipped": [], "ignored": [], "options": {}}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def batches_match_per_sample(folder, workers: int) -> list[dict]:
    ds = packer.open_dataset(folder, decode="raw", shuffle=True, seed=1)
    ours = list(packer.DataLoader(ds, batch_size=16, num_workers=workers))
    theirs = list(torch.utils.data.DataLoader(ds, batch_size=16, num_workers=workers,
                                              collate_fn=collate_samples))
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        assert a.keys() == b.keys() and a["__key__"] == b["__key__"] and a["jpg"] == b["jpg"]
        assert a["cls"].dtype == b["cls"].dtype == torch.int64
        assert torch.equal(a["cls"], b["cls"])
    return ours


def test_a_window_of_packer_shards_is_read_as_columns(shards):
    ds = packer.open_dataset(shards, decode="raw")
    reader = ds.source.reader()
    runs = next(plan.windows(ds._runs(0, 1), 100))  # 100 samples: across two shards
    window = reader.read_columns(runs)
    samples = [s for run in runs for s in reader.read(run.part, run.start, run.count)]
    reader.close()
    assert set(window) == {"__key__", "cls", "jpg"} and len(window["jpg"]) == 100
    assert isinstance(window["cls"], np.ndarray) and window["cls"].dtype == np.int64
    assert window["__key__"] == [s["__key__"] for s in samples]
    assert window["cls"].tolist() == [s["cls"] for s in samples]
    assert window["jpg"] == [s["jpg"] for s in samples]
    for workers in (0, 2):
        assert sum(len(b["jpg"]) for b in batches_match_per_sample(shards, workers)) == 120


def test_a_window_read_into_a_buffer_gives_spans_of_the_same_bytes(shards):
    """In a worker, a window is read straight into one of its slots: each value a span
    of it, no copy of its own; a buffer that is not given leaves the usual columns."""
    ds = packer.open_dataset(shards, decode="raw")
    reader = ds.source.reader()
    runs = next(plan.windows(ds._runs(0, 1), 100))
    given = []
    window = reader.read_columns(runs, lambda n: given.append(n) or np.zeros(n, np.uint8))
    usual = reader.read_columns(runs)
    fallback = reader.read_columns(runs, lambda n: None)
    reader.close()
    assert fallback["jpg"] == usual["jpg"] and fallback["__key__"] == usual["__key__"]
    spans = window["jpg"]
    assert isinstance(spans, Spans) and len(spans.buffer) == given[0]
    assert [spans.value(i) for i in range(100)] == usual["jpg"]
    assert window["__key__"] == usual["__key__"] and window["cls"].tolist() == usual["cls"].tolist()


@pytest.mark.parametrize("slots", [1, 3, 32])
def test_windows_in_slots_are_not_written_again_before_their_batches_land(shards, slots,
                                                                          monkeypatch):
    """Many small windows, every batch kept: a slot written again while batches of its
    window were still on their way would change their bytes; with too few slots the
    windows are read as usual and the batches cross in the pickle."""
    monkeypatch.setattr(ring, "SLOTS", slots)  # the workers fork with it
    ds = packer.open_dataset(shards, decode="raw", shuffle=True, seed=3, shuffle_buffer=20)
    kept = list(packer.DataLoader(ds, batch_size=4, num_workers=2))
    theirs = list(torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2,
                                              collate_fn=collate_samples))
    assert [b["__key__"] for b in kept] == [b["__key__"] for b in theirs]
    assert [b["jpg"] for b in kept] == [b["jpg"] for b in theirs]
    assert all(type(value) is bytes for b in kept for value in b["jpg"])


def test_a_shard_cut_short_after_it_was_opened_is_named_not_read_short(shards, tmp_path):
    """Indexed, then cut (a file changed under a running read): the window read into a
    slot comes up short, and the samples read one by one name the shard."""
    copy = tmp_path / "cut"
    shutil.copytree(shards, copy)
    last = sorted(copy.glob("*.tar"))[-1]
    ds = packer.open_dataset(copy, decode="raw", on_error="raise")
    reader = ds.source.reader()
    runs = [plan.Segment(len(ds.source.part_counts) - 1, 0, 20)]
    reader.index(runs[0].part)
    os.truncate(last, reader.index(runs[0].part).offset[30])
    assert reader.read_columns(runs, lambda n: np.zeros(n, np.uint8)) is None
    with pytest.raises(DatasetError, match=f"{last.name}: truncated: the members at byte "
                                           r"offsets [\d,]+ to [\d,]+ were indexed, but"):
        reader.read(runs[0].part, 0, 20)
    reader.close()
    for workers in (0, 2):  # the workers inherit the index made before the cut
        with pytest.raises(DatasetError, match=f"{last.name}: truncated"):
            list(packer.DataLoader(ds, batch_size=8, num_workers=workers))


def test_shards_whose_samples_differ_in_members_are_read_sample_by_sample(tmp_path):
    """Members in another order in one sample: that shard gives no columns, and its
    batches are still the per-sample ones."""
    samples = [[(f"{i:02d}.jpg", image_bytes(i)), (f"{i:02d}.cls", str(i % 3).encode())]
               for i in range(30)]
    samples[7].reverse()
    folder = foreign(tmp_path / "mixed", samples)
    ds = packer.open_dataset(folder, decode="raw")
    reader = ds.source.reader()
    assert reader.read_columns([plan.Segment(0, 0, 30)]) is None
    assert reader.read_columns([plan.Segment(0, 0, 30)]) is None  # known once, kept
    reader.close()
    for workers in (0, 2):
        batches_match_per_sample(folder, workers)


def test_class_ids_in_a_slot_are_read_as_int_reads_them():
    """Plain digits are read in a few array operations; anything else (a sign, a space,
    a newline, an empty or a 19-digit member) leaves it to int()."""
    values = [b"0", b"7", b"12", b"007", b"123456789012345678", b"99"]
    buffer = np.frombuffer(b"jpg".join(values), np.uint8)
    ends = np.cumsum([len(v) + 3 for v in values]) - 3
    spans = Spans(buffer, ends - [len(v) for v in values], ends)
    assert spans.decimals().tolist() == [int(v) for v in values]
    assert spans.decimals().dtype == np.int64
    for odd in (b"-3", b"+3", b"3\n", b" 4", b"", b"1234567890123456789", b"1_0"):
        one = Spans(np.frombuffer(odd, np.uint8), np.array([0]), np.array([len(odd)]))
        assert one.decimals() is None


@pytest.mark.parametrize("workers", [0, 2])
def test_class_ids_other_tools_write_are_read_alike_from_slots(tmp_path, workers):
    """Class ids with a newline, a sign or leading zeros (other tools write them so):
    the same ids with workers (read into slots) as without."""
    ids = [b"3\n", b"-1", b"007", b"12", b" 5"]
    samples = [[(f"{i:02d}.jpg", image_bytes(i)), (f"{i:02d}.cls", ids[i % 5])]
               for i in range(40)]
    folder = foreign(tmp_path / "ids", samples)
    batches = batches_match_per_sample(folder, workers)
    assert sorted(torch.cat([b["cls"] for b in batches]).tolist()) == sorted(
        int(ids[i % 5]) for i in range(40))


def test_a_class_id_that_is_not_a_number_is_named_in_a_batch(tmp_path):
    samples = [[(f"{i:02d}.jpg", image_bytes(i)), (f"{i:02d}.cls", str(i % 3).encode())]
               for i in range(30)]
    samples[11][1] = ("11.cls", b"cat")
    folder = foreign(tmp_path / "cat", samples)
    ds = packer.open_dataset(folder, decode="raw")
    reader = ds.source.reader()
    assert reader.read_columns([plan.Segment(0, 0, 30)]) is None
    reader.close()
    for workers in (0, 2):
        ds = packer.open_dataset(folder, decode="raw", on_error="raise")
        with pytest.raises(DatasetError, match=r"shard-000000.tar: the member at byte offset "
                                               r"\d[\d,]* holds b'cat', not a class id"):
            list(packer.DataLoader(ds, batch_size=8, num_workers=workers))


def test_a_batch_across_a_window_in_a_slot_and_one_read_apart_is_made_as_laid_out(
        monkeypatch):
    """A worker that found no free slot for the next window reads it as usual: a batch
    taking samples from both windows still takes each value from its own column, with
    no dict made per sample."""
    from packer.read import lean
    monkeypatch.setattr(lean, "_sample", lambda window, i: pytest.fail("read sample by sample"))
    buffer = np.frombuffer(b"xxAAAyyBB", np.uint8).copy()
    in_slot = {"__key__": ["a0", "a1"], "cls": np.array([0, 1]),
               "jpg": Spans(buffer, np.array([2, 7]), np.array([5, 9]))}
    apart = {"__key__": ["b0"], "cls": np.array([2]), "jpg": [b"CC"]}
    layout = lean.Layout({"__key__": lean.LIST, "cls": lean.CLASS, "jpg": lean.LIST}, None)
    batch = lean.pieces_batch([(in_slot, [1, 0]), (apart, [0])], layout,
                              lambda samples: pytest.fail("decoded sample by sample"))
    assert batch["__key__"] == ["a1", "a0", "b0"] and batch["jpg"] == [b"BB", b"AAA", b"CC"]
    assert batch["cls"].tolist() == [1, 0, 2]
