"""The format protocol, not a format's name, drives packing, verify, bench, unpack and
the loader: a format registered by this test alone goes through all of them."""

import json

import pytest

import packer
from conftest import image_bytes, run, source_files
from packer import formats
from packer.bench.measure import BenchOptions, bench
from packer.formats import FORMAT_NAMES, format_module
from packer.formats.protocol import missing_names


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_every_registered_format_implements_the_protocol(fmt):
    assert missing_names(format_module(fmt)) == []
    assert format_module(fmt).NAME == fmt


@pytest.fixture
def toy(monkeypatch):
    """The toy format, in the registry only for this test."""
    monkeypatch.setitem(formats._MODULES, "toy", "toy_format")
    monkeypatch.setattr("packer.formats.protocol.BLOCK_COUNT", 7)  # several parts
    return format_module("toy")


def test_a_format_is_one_module_and_one_registry_line(toy, tmp_path):
    assert missing_names(toy) == []
    images = tmp_path / "images"
    for c in range(2):
        (images / f"c{c}").mkdir(parents=True)
        for i in range(10):
            (images / f"c{c}" / f"{i}.jpg").write_bytes(image_bytes(c * 10 + i))
    out = tmp_path / "toy"
    manifest = packer.pack(images, out, packer.PackOptions(to="toy", progress=False))
    assert manifest["format"] == "toy" and manifest["count"] == 20
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json"] + [
        f"part-{i}.bin" for i in range(3)]
    assert packer.verify(out, against=images, progress=False)["ok"]
    assert "OK: 20 samples" in run("verify", out, "-q").output
    assert "3 parts" in run("inspect", out).output

    (out / "part-1.bin").write_bytes((out / "part-1.bin").read_bytes()[:-3])  # cut a sample
    report = packer.verify(out, progress=False)
    assert not report["ok"] and "part-1.bin" in report["problems"][0]
    packer.pack(images, out, packer.PackOptions(to="toy", progress=False, overwrite=True))

    restored = tmp_path / "restored"
    packer.unpack(out, restored, progress=False)
    assert source_files(restored) == source_files(images)

    dataset = packer.open_dataset(out, decode="raw", shuffle=True)
    keys = sorted(s["__key__"] for s in dataset)
    assert len(dataset) == 20 and keys == sorted(s["__key__"] for s in packer.iter_samples(out))

    report = bench([str(images), str(out)], BenchOptions(workers=[0], repeat=1, decode=False),
                   progress=lambda _: None)
    assert report["ceilings"][str(out)]["kind"] == "toy"
    assert report["ceilings"][str(out)]["cat_samples_per_s"] > 0
    assert {r["samples"] for r in report["results"]} == {20}
    json.dumps(report)


def test_public_names_stay_the_functions_after_their_modules_load():
    import packer.datasets.info  # noqa: F401
    import packer.datasets.unpack  # noqa: F401
    import packer.datasets.verify  # noqa: F401
    import packer.packing.pipeline  # noqa: F401

    for _ in range(2):
        assert callable(packer.verify) and callable(packer.unpack) and callable(packer.pack)
        assert callable(packer.dataset_info) and callable(packer.load_manifest)


def test_a_part_option_names_the_formats_that_read_it(toy, monkeypatch):
    monkeypatch.setattr(toy, "PACK_OPTIONS", frozenset({"max_count"}))
    help_text = " ".join(run("pack", "--help").output.split())
    assert "--max-count INTEGER RANGE webdataset, tfrecord, toy: most samples" in help_text
    assert "--shard-size SIZE webdataset, tfrecord: most bytes" in help_text
