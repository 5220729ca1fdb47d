"""`packer bench` on a small dataset: every figure present, counts agreeing."""

import json

import pytest

from conftest import image_bytes, run


@pytest.fixture
def loose_and_packed(tmp_path):
    images = tmp_path / "images"
    for c in range(3):
        (images / f"c{c}").mkdir(parents=True)
        for i in range(20):
            (images / f"c{c}" / f"{i}.jpg").write_bytes(image_bytes(c * 50 + i, size=(40, 30)))
    (images / "c0" / "broken.jpg").write_bytes(b"not an image")
    run("pack", images, "-o", tmp_path / "wds", "-q")
    run("pack", images, "--to", "hdf5", "-o", tmp_path / "h5", "-q")
    return images, tmp_path / "wds", tmp_path / "h5"


def test_bench_reports_every_reader_and_worker_count(loose_and_packed, tmp_path):
    paths = [str(p) for p in loose_and_packed]
    out = run("bench", *paths, "--workers", "0,1", "--repeat", "1", "--cold", "--batch-size",
              "16", "--json", tmp_path / "b.json", "--plot", tmp_path / "b.png", "-q").output
    report = json.loads((tmp_path / "b.json").read_text())
    rows = {(r["reader"], r["cache"], r["workers"]): r for r in report["results"]}
    assert set(rows) == {(p, c, w) for p in paths for c in ("warm", "cold") for w in (0, 1)}
    assert {r["samples"] for r in rows.values()} == {60}  # the broken file is left out
    for row in rows.values():
        assert row["samples_per_s"] > 0 and row["mb_per_s"] > 0 and row["first_batch_s"] > 0
        assert row["peak_rss_mb"] >= row["peak_pss_mb"] > 0 and row["vs_loose"] > 0
    assert report["cold_drop_works"] is True
    assert report["ceilings"]["decode_limit_samples_per_s"] > 0
    assert all(report["ceilings"][p]["cat_samples_per_s"] > 0 for p in paths)
    assert set(report["recommend"]) == set(paths)
    assert (tmp_path / "b.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "recommended num_workers" in out and "page cache drop: took effect" in out


def test_bench_refuses_bad_paths_and_worker_counts(loose_and_packed, tmp_path):
    assert "not a folder" in run("bench", tmp_path / "missing", expect=2).output
    bad = run("bench", str(loose_and_packed[0]), "--workers", "-1", expect=2).output
    assert "0 or more" in bad


def test_bench_reads_transformed_packs_and_shows_how_they_are_stored(loose_and_packed, tmp_path):
    images = loose_and_packed[0]
    run("pack", images, "-o", tmp_path / "small", "--resize", "16", "-q")
    run("pack", images, "--to", "lmdb", "-o", tmp_path / "raw", "--resize", "16x16", "--encode",
        "raw", "-q")
    paths = [str(images), str(tmp_path / "small"), str(tmp_path / "raw")]
    out = run("bench", *paths, "--workers", "0,2", "--repeat", "1", "--batch-size", "16",
              "--json", tmp_path / "b.json", "-q").output
    report = json.loads((tmp_path / "b.json").read_text())
    assert {r["samples"] for r in report["results"]} == {60}
    assert report["stored"][paths[1]]["images"] == "shorter side 16, keep"
    assert report["stored"][paths[2]]["images"] == "16x16 (crop), raw pixels"
    assert all(report["stored"][p]["bytes"] > 0 for p in paths)
    assert report["stored"][paths[0]]["images"] == "as the files are"
    assert f"stored, {paths[2]}: " in out and "images 16x16 (crop), raw pixels" in out


def test_bench_without_loose_files_compares_with_nothing(loose_and_packed, tmp_path):
    run("pack", loose_and_packed[0], "--to", "lmdb", "-o", tmp_path / "ds", "-q")
    out = run("bench", tmp_path / "ds", "--workers", "0", "--repeat", "1", "-q").output
    assert any(" warm " in line and line.rstrip().endswith(" n/a") for line in out.splitlines())
    assert "1.00x" not in out


def test_a_run_over_before_the_sampler_starts_still_has_a_peak():
    from packer.bench.probes import MemoryPeak

    peak = MemoryPeak()
    peak._thread = __import__("threading").Thread(target=lambda: None)  # never samples
    with peak:
        pass
    assert peak.rss >= peak.pss > 0
