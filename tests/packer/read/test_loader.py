"""The streaming loader: exact, shuffled, resumable reads of every format."""

import itertools
import json
import warnings
from collections import Counter

import pytest
import torch

import packer
from conftest import image_bytes, run
from packer.errors import DatasetError
from packer.formats import FORMAT_NAMES

CLASSES = 5
PER_CLASS = 30


@pytest.fixture(scope="module")
def packed(packed_images):
    """A class-sorted image folder packed three ways; tar shards of 20 samples (uneven)."""
    sizes = ((8, 5), (6, 3))
    made = packed_images((PER_CLASS,) * CLASSES, size=sizes, max_count=20)
    one_shard = packed_images((PER_CLASS,) * CLASSES, size=sizes, formats=("webdataset",))
    return {fmt: made[fmt, "jpg"] for fmt in FORMAT_NAMES} | {
        "one-shard": one_shard["webdataset", "jpg"]}


def keys_of(path):
    return [s["__key__"] for s in packer.iter_samples(path)]


def epoch_keys(ds, num_workers):
    """Each worker's keys for this epoch, as DataLoader workers would yield them."""
    return [[s["__key__"] for s in ds.iter_worker(w, max(num_workers, 1))]
            for w in range(max(num_workers, 1))]


@pytest.mark.parametrize("fmt", [*FORMAT_NAMES, "one-shard"])
@pytest.mark.parametrize("remainder", ["pad", "drop"])
def test_every_sample_once_across_workers_and_ranks(packed, fmt, remainder):
    everything = keys_of(packed[fmt])
    total = len(everything)
    for world in range(1, 5):
        for workers in range(0, 5):
            seen = []
            for rank in range(world):
                ds = packer.open_dataset(packed[fmt], shuffle=True, seed=3, decode="raw",
                                         rank=rank, world_size=world, remainder=remainder)
                ds.set_epoch(1)
                rank_keys = [k for worker in epoch_keys(ds, workers) for k in worker]
                assert len(rank_keys) == len(ds)
                seen += rank_keys
            counts = Counter(seen)
            if remainder == "drop":
                assert len(seen) == total // world * world and max(counts.values()) == 1
            else:
                assert set(counts) == set(everything)
                assert len(seen) - total == -total % world  # only the padding repeats


def test_shuffle_is_fixed_by_seed_and_epoch_and_mixes_classes(packed):
    def order(seed, epoch):
        ds = packer.open_dataset(packed["webdataset"], shuffle=True, seed=seed, decode="raw")
        ds.set_epoch(epoch)
        return [s["__key__"] for s in ds]

    assert order(0, 0) == order(0, 0)
    assert order(0, 0) != order(0, 1) and order(0, 0) != order(1, 0)
    assert sorted(order(0, 0)) == sorted(keys_of(packed["webdataset"]))
    first_batch = order(0, 0)[:32]
    assert len({key.split("/")[0] for key in first_batch}) >= 4  # class-sorted on disk


def test_same_batches_from_every_format(packed):
    batches = {}
    for fmt in FORMAT_NAMES:
        ds = packer.open_dataset(packed[fmt], image_size=16)
        batch = next(iter(torch.utils.data.DataLoader(ds, batch_size=150)))
        batches[fmt] = batch
        assert batch["jpg"].shape == (150, 3, 16, 16) and batch["jpg"].dtype == torch.uint8
    for fmt in ("lmdb", "hdf5", "tfrecord"):
        assert batches[fmt]["__key__"] == batches["webdataset"]["__key__"]
        assert torch.equal(batches[fmt]["jpg"], batches["webdataset"]["jpg"])
        assert torch.equal(batches[fmt]["cls"], batches["webdataset"]["cls"])
    assert batches["webdataset"]["cls"].tolist() == [i // PER_CLASS for i in range(150)]


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_resume_continues_with_exactly_the_unseen_samples(packed, fmt):
    ds = packer.open_dataset(packed[fmt], shuffle=True, seed=5, decode="raw")
    ds.set_epoch(2)
    loader = packer.DataLoader(ds, batch_size=7, num_workers=2)
    seen = []
    for number, batch in enumerate(loader):
        seen += batch["__key__"]
        if number == 6:
            break
    state = json.loads(json.dumps(ds.state_dict()))  # survives a checkpoint file
    fresh = packer.open_dataset(packed[fmt], shuffle=True, seed=5, decode="raw")
    fresh.load_state_dict(state)
    rest = [k for batch in packer.DataLoader(fresh, batch_size=7, num_workers=2)
            for k in batch["__key__"]]
    assert len(seen) == 49 and not set(seen) & set(rest)
    assert sorted(seen + rest) == sorted(keys_of(packed[fmt]))


def test_resume_in_the_main_process(packed):
    ds = packer.open_dataset(packed["hdf5"], shuffle=True, decode="raw")
    iterator = iter(ds)
    seen = [next(iterator)["__key__"] for _ in range(40)]
    fresh = packer.open_dataset(packed["hdf5"], shuffle=True, decode="raw")
    fresh.load_state_dict(ds.state_dict())
    rest = [s["__key__"] for s in fresh]
    assert sorted(seen + rest) == sorted(keys_of(packed["hdf5"]))


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_spawned_workers_read_everything(packed, fmt):
    ds = packer.open_dataset(packed[fmt], decode="rgb8", image_size=8)
    loader = torch.utils.data.DataLoader(ds, batch_size=50, num_workers=2,
                                         multiprocessing_context="spawn")
    keys = [k for batch in loader for k in batch["__key__"]]
    assert sorted(keys) == sorted(keys_of(packed[fmt]))


def test_forked_workers_after_reading_in_the_main_process(packed):
    ds = packer.open_dataset(packed["lmdb"], decode="raw")
    assert len(list(ds)) == 150  # opens the environment in this process first
    loader = torch.utils.data.DataLoader(ds, batch_size=50, num_workers=2)
    assert sum(len(b["__key__"]) for b in loader) == 150


def test_corrupt_member_is_replaced_with_a_warning_or_raises(packed, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(packed["webdataset"], broken)
    shard = broken / "shard-000000.tar"
    data = bytearray(shard.read_bytes())
    start = data.find(b"\xff\xd8\xff")
    data[start:start + 40] = b"\x00" * 40  # the first image no longer decodes
    shard.write_bytes(bytes(data))
    ds = packer.open_dataset(broken, decode="rgb8", image_size=8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        samples = list(ds)
    assert len(samples) == len(ds) == 150 and ds.errors == 1
    assert "c0/000" in str(caught[0].message)
    assert "replaced by another sample" in str(caught[0].message)
    skipping = packer.open_dataset(broken, decode="rgb8", image_size=8, on_error="skip")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert len(list(skipping)) == 149
    with pytest.raises(OSError) as raised:
        list(packer.open_dataset(broken, decode="rgb8", on_error="raise"))
    assert "in sample 'c0/000'" in raised.value.__notes__[0]


FAILING: set[str] = set()  # keys whose transform fails (read by forked workers too)


def fail_some(sample):
    if sample["__key__"] in FAILING:
        raise ValueError("a sample that does not decode")
    return sample


def batch_keys(loader, batches=None) -> list[str]:
    """The keys of the first `batches` batches (all, if None) the loader gives."""
    return [key for batch in itertools.islice(loader, batches) for key in batch["__key__"]]


def test_a_resume_with_skipped_samples_delivers_each_other_sample_once(packed):
    """Skipped samples count in their batch's size: before, a resume after them went
    back by as many samples as had been skipped, and delivered those again."""
    FAILING.update(k for i, k in enumerate(keys_of(packed["lmdb"])) if i % 7 == 0)
    try:
        def loader(state=None):
            ds = packer.open_dataset(packed["lmdb"], decode="raw", shuffle=True, seed=3,
                                     on_error="skip", transform=fail_some)
            if state:
                ds.load_state_dict(state)
            return ds, packer.DataLoader(ds, batch_size=8, num_workers=2)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds, first_loader = loader()
            first = batch_keys(first_loader, batches=7)
            rest = batch_keys(loader(ds.state_dict())[1])
        assert len(first) + len(rest) == len(set(first + rest)) == 150 - len(FAILING)
        assert not set(first + rest) & FAILING
    finally:
        FAILING.clear()


def test_a_worker_whose_every_sample_fails_still_yields_its_count(packed):
    ds = packer.open_dataset(packed["lmdb"], decode="raw", transform=fail_some)
    FAILING.update(s["__key__"] for s in ds.iter_worker(1, 2))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            stood_in = list(ds.iter_worker(1, 2))
        assert len(stood_in) == ds.worker_sizes(2)[1] > 0
        assert not {s["__key__"] for s in stood_in} & FAILING
        FAILING.update(keys_of(packed["lmdb"]))
        with warnings.catch_warnings(), pytest.raises(DatasetError, match="no sample"):
            warnings.simplefilter("ignore")
            list(ds.iter_worker(1, 2))
    finally:
        FAILING.clear()


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_holdout_splits_the_dataset_in_two_exact_parts(packed, fmt):
    train = packer.open_dataset(packed[fmt], decode="raw", shuffle=True, holdout=(0.2, "train"))
    val = packer.open_dataset(packed[fmt], decode="raw", holdout=(0.2, "val"))
    train_keys, val_keys = [s["__key__"] for s in train], [s["__key__"] for s in val]
    assert len(train_keys) == len(train) and len(val_keys) == len(val)
    assert not set(train_keys) & set(val_keys)
    assert sorted(train_keys + val_keys) == sorted(keys_of(packed[fmt]))
    assert 0.15 < len(val) / 150 < 0.3
    assert len({k.split("/")[0] for k in val_keys}) >= 2  # spread over the dataset


def test_mixed_image_extensions_come_under_one_key(tmp_path):
    images = tmp_path / "mixed"
    for folder, names in {"a": ["1.jpg", "2.JPG"], "b": ["3.png", "4.jpg"]}.items():
        (images / folder).mkdir(parents=True)
        for number, name in enumerate(names):
            fmt = "PNG" if name.endswith("png") else "JPEG"
            (images / folder / name).write_bytes(image_bytes(number, fmt, size=(10, 8)))
    run("pack", images, "-o", tmp_path / "wds", "-q")
    ds = packer.open_dataset(tmp_path / "wds", image_size=8)
    assert ds.image_field == "image"
    batch = next(iter(packer.DataLoader(ds, batch_size=4, num_workers=0)))
    assert batch["image"].shape == (4, 3, 8, 8) and batch["cls"].tolist() == [0, 0, 1, 1]


def test_image_pairs_keep_their_fields(tmp_path):
    images = tmp_path / "pairs"
    images.mkdir()
    for number in range(3):
        (images / f"{number}.jpg").write_bytes(image_bytes(number, size=(10, 8)))
        (images / f"{number}.png").write_bytes(image_bytes(number, "PNG", size=(10, 8)))
    run("pack", images, "-o", tmp_path / "wds", "--group-by-stem", "-q")
    ds = packer.open_dataset(tmp_path / "wds")
    assert ds.image_field is None
    assert {"jpg", "png"} <= set(next(iter(ds)))


@pytest.mark.filterwarnings("ignore:This DataLoader will create")  # 3 workers on 2 cores
@pytest.mark.parametrize("workers", [0, 2, 3])
def test_len_of_the_loader_counts_the_batches_it_gives(packed, workers):
    ds = packer.open_dataset(packed["webdataset"], decode="raw")
    for drop_last in (False, True):
        loader = packer.DataLoader(ds, batch_size=16, num_workers=workers, drop_last=drop_last)
        assert len(loader) == sum(1 for _ in loader)


def test_mixed_image_extensions_in_shards_from_another_tool(tmp_path):
    import webdataset

    with webdataset.TarWriter(str(tmp_path / "foreign.tar")) as sink:
        for number in range(4):
            ext = "png" if number % 2 else "jpg"
            data = image_bytes(number, "PNG" if ext == "png" else "JPEG", size=(10, 8))
            sink.write({"__key__": f"s{number}", ext: data, "cls": number % 2})
    ds = packer.open_dataset(str(tmp_path / "foreign.tar"), image_size=8)
    assert ds.image_field == "image"
    batch = next(iter(packer.DataLoader(ds, batch_size=4)))
    assert batch["image"].shape == (4, 3, 8, 8)


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_persistent_workers_follow_set_epoch(packed, context):
    ds = packer.open_dataset(packed["webdataset"], shuffle=True, decode="raw")
    loader = torch.utils.data.DataLoader(ds, batch_size=50, num_workers=2, collate_fn=list,
                                         persistent_workers=True,
                                         multiprocessing_context=context)
    orders = []
    for epoch in range(3):
        ds.set_epoch(epoch)
        orders.append([s["__key__"] for batch in loader for s in batch])
    assert orders[0] != orders[1] != orders[2]
    fresh = torch.utils.data.DataLoader(ds, batch_size=50, num_workers=2, collate_fn=list)
    assert [s["__key__"] for batch in fresh for s in batch] == orders[2]


def packed_with(tmp_path, images: int, name: str, text: str):
    """A class folder of `images` JPEGs and one more file, `name`, packed to shards."""
    folder = tmp_path / "images" / "a"
    folder.mkdir(parents=True)
    for i in range(images):
        (folder / f"{i}.jpg").write_bytes(image_bytes(i, size=(10, 8)))
    (folder / name).write_text(text)
    run("pack", folder.parent, "-o", tmp_path / "wds", "-q")
    return tmp_path / "wds"


def test_a_sample_without_the_image_is_replaced_and_named(tmp_path):
    ds = packer.open_dataset(packed_with(tmp_path, 5, "notes", "not an image"), image_size=8)
    with pytest.warns(UserWarning, match=r"'a/notes' .* no jpg field to decode \(its fields: "
                      r"_, cls\)\); replaced by another sample"):
        batches = list(packer.DataLoader(ds, batch_size=3))
    assert sum(len(b["cls"]) for b in batches) == 6 and batches[0]["jpg"].shape[1:] == (3, 8, 8)


def test_a_batch_of_samples_with_different_fields_is_explained(tmp_path):
    ds = packer.open_dataset(packed_with(tmp_path, 4, "2.json", '{"note": 1}'), image_size=8)
    with pytest.raises(ValueError, match=r"'a/2' has jpg, json, cls, most have cls, jpg; "
                                         r"drop the odd fields in a transform="):
        list(packer.DataLoader(ds, batch_size=4))
    drop = packer.open_dataset(tmp_path / "wds", image_size=8,
                               transform=lambda s: {k: v for k, v in s.items() if k != "json"})
    assert [b["jpg"].shape[0] for b in packer.DataLoader(drop, batch_size=4)] == [4]


@pytest.mark.parametrize("program", ["training", "packing"])
def test_the_reading_side_is_imported_with_packer_where_torch_already_is(program):
    """A training program (torch imported first) gets the reading side with `import
    packer`, not inside its first epoch; packing alone never imports torch."""
    import subprocess
    import sys

    imports = {"training": "import torch, packer",
               "packing": "import packer; packer.PackOptions; packer.pack"}[program]
    code = (f"import sys; {imports}; "
            "print('torch' in sys.modules, 'packer.read.loader' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    expected = {"training": ["True", "True"], "packing": ["False", "False"]}[program]
    assert done.stdout.split() == expected
