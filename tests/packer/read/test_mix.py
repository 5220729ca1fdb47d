"""Several packed datasets read as one, in given proportions (packer.read.mix)."""

import json
from collections import Counter

import pytest

import packer
from conftest import image_bytes, run

OPTIONS = {"shuffle": True, "seed": 3, "decode": "raw", "unit": 8, "shuffle_buffer": 32}


def labelled(root, prefix: str, classes: dict[str, int]):
    """class folders of tiny JPEGs named PREFIX000.jpg ... (keys tell the dataset)."""
    for number, (name, count) in enumerate(classes.items()):
        (root / name).mkdir(parents=True)
        for i in range(count):
            (root / name / f"{prefix}{i:03d}.jpg").write_bytes(
                image_bytes(number * 1000 + i, size=(8, 6)))
    return root


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """a: 120 samples (cat, dog) in tar shards; b: 60 samples (bird, dog) in an LMDB."""
    root = tmp_path_factory.mktemp("mix")
    labelled(root / "a-images", "a", {"cat": 60, "dog": 60})
    labelled(root / "b-images", "b", {"bird": 30, "dog": 30})
    run("pack", root / "a-images", "-o", root / "a", "--max-count", "25", "-q")
    run("pack", root / "b-images", "--to", "lmdb", "-o", root / "b", "-q")
    return root


def source(key: str) -> str:
    return key.split("/")[-1][0]


def keys(ds) -> list[str]:
    return [sample["__key__"] for sample in ds]


def loader_keys(ds, workers=2, batch_size=16) -> list[str]:
    return [k for b in packer.DataLoader(ds, batch_size=batch_size, num_workers=workers)
            for k in b["__key__"]]


def test_the_proportions_hold_within_two_percent_over_10000_draws(data):
    ds = packer.open_dataset([data / "a", data / "b"], weights=[0.7, 0.3], samples=10_000,
                             **OPTIONS)
    assert len(ds) == 10_000
    drawn = Counter(source(key) for key in loader_keys(ds, batch_size=100))
    assert abs(drawn["a"] / 10_000 - 0.7) < 0.02 and sum(drawn.values()) == 10_000
    first = Counter(source(key) for key in keys(ds)[:1000])  # every stretch, not only the whole
    assert abs(first["a"] / 1000 - 0.7) < 0.05


def test_the_mix_is_fixed_by_seed_and_epoch(data):
    def order(seed, epoch):
        ds = packer.open_dataset([data / "a", data / "b"], weights=[1, 1],
                                 **{**OPTIONS, "seed": seed})
        ds.set_epoch(epoch)
        return keys(ds)

    assert order(3, 0) == order(3, 0)
    assert order(3, 0) != order(3, 1) and order(3, 0) != order(4, 0)


def test_an_epoch_ends_when_the_first_dataset_is_used_up_each_sample_once(data):
    ds = packer.open_dataset([data / "a", data / "b"], weights=[0.5, 0.5], **OPTIONS)
    assert len(ds) == 120  # b (60 samples) gives half: 60 of each
    epochs = []
    for epoch in range(3):
        ds.set_epoch(epoch)
        epochs.append(Counter(keys(ds)))
    all_b = {k for k in epochs[0] if source(k) == "b"}
    for counts in epochs:  # b whole, once, in every epoch; a half of it
        assert sorted(source(k) for k in counts.elements()).count("b") == 60
        assert {k for k in counts if source(k) == "b"} == all_b and max(counts.values()) == 1
    a_two_epochs = [k for counts in epochs[:2] for k in counts if source(k) == "a"]
    assert len(a_two_epochs) == len(set(a_two_epochs)) == 120  # a once over two epochs


def test_classes_are_matched_by_name(data):
    ds = packer.open_dataset([data / "a", data / "b"], weights=[1, 1], **OPTIONS)
    assert ds.classes == ["cat", "dog", "bird"]
    batches = list(packer.DataLoader(ds, batch_size=16, num_workers=2))  # columns of a window
    named = [(key.split("/")[0], ds.classes[int(c)]) for b in batches
             for key, c in zip(b["__key__"], b["cls"], strict=True)]
    samples = [(s["__key__"].split("/")[0], ds.classes[int(s["cls"])]) for s in ds]
    for pairs in (named, samples):  # read by the workers, and sample by sample
        assert all(folder == name for folder, name in pairs) and len(pairs) == 120
        assert {folder for folder, _ in pairs} == {"cat", "dog", "bird"}
    decoded = packer.open_dataset([data / "a", data / "b"], weights=[1, 1], image_size=4,
                                  **{**OPTIONS, "decode": "rgb8"})
    batch = next(iter(packer.DataLoader(decoded, batch_size=120)))
    assert [decoded.classes[c] for c in batch["cls"].tolist()] == [
        k.split("/")[0] for k in batch["__key__"]]
    assert batch["jpg"].shape == (120, 3, 4, 4)


def test_ranks_and_workers_share_the_mix_once(data):
    whole = packer.open_dataset([data / "a", data / "b"], weights=[2, 1], samples=150, **OPTIONS)
    seen = []
    for rank in range(3):
        ds = packer.open_dataset([data / "a", data / "b"], weights=[2, 1], samples=150,
                                 rank=rank, world_size=3, **OPTIONS)
        got = loader_keys(ds, workers=2, batch_size=8)
        assert len(got) == len(ds) == 50
        seen += got
    assert Counter(seen) == Counter(keys(whole))


@pytest.mark.parametrize("workers", [2, 3])
def test_a_mix_resumes_mid_epoch(data, workers):
    def mixed():
        return packer.open_dataset([data / "a", data / "b"], weights=[0.6, 0.4], samples=200,
                                   **OPTIONS)

    ds = mixed()
    ds.set_epoch(1)
    seen = []
    for number, batch in enumerate(packer.DataLoader(ds, batch_size=8, num_workers=2)):
        seen += batch["__key__"]
        if number == 6:
            break
    state = json.loads(json.dumps(ds.state_dict()))
    again = mixed()
    again.load_state_dict(state)
    rest = loader_keys(again, workers=workers, batch_size=8)
    epoch = mixed()
    epoch.set_epoch(1)
    assert Counter(seen + rest) == Counter(keys(epoch)) and len(seen) == 56
    other = packer.open_dataset([data / "a", data / "b"], weights=[0.5, 0.5], samples=200,
                                **OPTIONS)
    with pytest.raises(ValueError, match="another dataset or order.*120 \\+ 80 samples"):
        other.load_state_dict(state)


def test_a_dataset_in_object_storage_mixes_with_a_local_one(data, s3, tmp_path):
    url = f"s3://{s3}/b"
    run("pack", data / "b-images", "-o", url, "--max-count", "20", "-q")
    ds = packer.open_dataset([data / "a", url], weights=[1, 1], cache_dir=tmp_path / "cache",
                             **OPTIONS)
    got = loader_keys(ds)
    assert Counter(map(source, got)) == {"a": 60, "b": 60} and len(set(got)) == 120


def test_bad_weights_are_refused_with_what_to_give(data):
    with pytest.raises(ValueError, match="one positive number per dataset \\(2 datasets\\)"):
        packer.open_dataset([data / "a", data / "b"], weights=[1])
    with pytest.raises(ValueError, match="give a list of them"):
        packer.open_dataset(data / "a", weights=[1])
    with pytest.raises(ValueError, match="weights=\\['a'\\]: give one positive number"):
        packer.open_dataset([data / "a"], weights=["a"])


def test_a_holdout_splits_each_dataset_and_sizes_read_each_sample_once(data):
    sides = {side: packer.open_dataset([data / "a", data / "b"], weights="sizes",
                                       holdout=(0.25, side), **OPTIONS)
             for side in ("train", "val")}
    got = {side: keys(ds) for side, ds in sides.items()}
    assert len(got["val"]) == len(set(got["val"])) == sides["val"].total
    assert len(got["train"]) == len(set(got["train"])) == 180 - sides["val"].total
    assert not set(got["train"]) & set(got["val"])
    assert Counter(map(source, got["val"])) == {"a": 30, "b": 15}
