"""`packer view`: one self-contained HTML page of a packed dataset, in every format."""

import wave
from pathlib import Path

import numpy as np
import pytest
from dumps import write_imu
from view_pages import PER_CLASS, planted_folder, view_page

from conftest import run
from packer.formats import FORMAT_NAMES
from packer.view.collect import Facts, SampleFacts
from packer.view.problems import find_problems
from s3_server import upload_folder


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> Path:
    return planted_folder(tmp_path_factory.mktemp("view") / "images")


# Not conftest's packed_images: a page is checked against the problems planted in its
# images (an empty file, a broken JPEG, ...), so these pack the planted folder.
def packed(source: Path, fmt: str, *options) -> Path:
    out = source.parent / (f"{fmt}.h5" if fmt == "hdf5" else fmt)
    if not out.exists():
        run("pack", source, "--to", fmt, "-o", out, "-q", *options)
    return out


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_page_of_every_format_shows_samples_skipped_inputs_and_planted_problems(
        planted, fmt, tmp_path):
    page = view_page(packed(planted, fmt), tmp_path / "view.html", "--per-class", "4")
    thumbnails = page.all("img", **{"class": "thumb"})
    assert len(thumbnails) == 3 * 4
    assert all(img["src"].startswith("data:image/jpeg;base64,") for img in thumbnails)
    assert len(page.all("dialog")) == 3 * 4
    # nothing outside the file: no address, no script or style fetched
    assert not [a for _, a in page.tags if any(str(v).startswith(("http", "//", "file:"))
                                              for k, v in a.items() if k in ("src", "href"))]
    assert not page.all("link") and not [a for a in page.all("script") if "src" in a]
    skipped = page.section("skipped")
    assert "empty file (0 bytes) (1) c0/empty.jpg: empty file (0 bytes)" in skipped
    assert "not a JPEG (1) c2/broken.jpg: not a JPEG" in skipped
    problems = page.section("problems")
    assert "The same payload under different classes: 1 " in problems
    assert " labels differ: one of the labels is wrong c0/000 (c0), c1/dup (c1)" in problems
    assert "Near-black images: 1 mean grey level at most 10 of 255 c2/black (c2, 30×30 px, " \
        "mean grey 0)" in problems
    overview = page.section("overview")
    assert "labels class folders (3 classes)" in overview
    assert f"Read {3 * PER_CLASS + 2} of {3 * PER_CLASS + 2} samples" in overview
    assert len(page.all("g", id="class-bar-0") + page.all("g", id="class-bar-2")) == 2


def test_a_dataset_with_splits_shows_them_its_bars_cut_by_split_and_its_leaks(planted,
                                                                             tmp_path):
    dataset = tmp_path / "split"
    run("pack", planted, "-o", dataset, "-q", "--split", "train=0.5,val=0.5", "--split-seed", 1)
    page = view_page(dataset, tmp_path / "view.html")
    overview = page.section("overview")
    assert "splits train 19, val 19 (train=0.5, val=0.5; stratified by class, seed 1)" in overview
    assert len(page.all("g", id="class-bar-1")) == len(page.all("g", id="split-bar-1-1")) == 1
    assert "c0/000 (" in overview and "c1/dup (" in overview  # the planted copy, a leak


def test_detail_shows_the_full_image_and_every_field(planted, tmp_path):
    page = view_page(packed(planted, "lmdb"), tmp_path / "view.html",
                     "--per-class", str(PER_CLASS + 1))
    full = page.all("img", **{"class": "full"})
    assert len(full) == 3 * PER_CLASS + 2  # every sample of the three classes
    assert sum(img["src"].startswith("data:image/png;base64,") for img in full) == 1
    assert '{\n  "note": "first",\n  "n": 1\n}' in "".join(page.text)  # pretty-printed


def test_same_seed_same_samples_other_seed_others(planted, tmp_path):
    dataset = packed(planted, "webdataset")

    def keys(seed: str) -> list[str]:
        page = view_page(dataset, tmp_path / f"{seed}.html", "--per-class", "2", "--seed", seed)
        return [img["alt"] for img in page.all("img", **{"class": "thumb"})]

    assert keys("0") == keys("0")
    assert len(keys("0")) == 6
    assert keys("0") != keys("5")


def test_max_samples_bounds_what_is_read(planted, tmp_path):
    page = view_page(packed(planted, "hdf5"), tmp_path / "view.html", "--max-samples", "10")
    assert f"Read 10 of {3 * PER_CLASS + 2} samples (a random 10: --max-samples 10)" in \
        page.section("overview")
    assert len(page.all("img", **{"class": "thumb"})) == 10
    assert "samples per class (all 38)" in page.html  # the chart counts every sample


def test_table_page_has_column_statistics_histograms_and_filled_cells(tmp_path):
    table = tmp_path / "t.csv"
    table.write_text("a,b,city,y\n1,2.5,x,0\n2,,y,1\n3,4,x,0\n,5,y,1\n5,6,x,0\n"
                     "6,7,x,1\n7,8,y,0\n8,9,x,1\n")
    out = tmp_path / "t.h5"
    run("pack", table, "--to", "hdf5", "--label-column", "y", "--na", "mean",
        "--categorical", "city", "-o", out, "-q")
    page = view_page(out, tmp_path / "view.html")
    columns = page.section("table")
    # column, count, mean, std, min, max, cells filled
    assert "a 8 4.571 2.283 1 8 1 b 8 5.929 1.975 2.5 9 1 city (categories: x, y) 8" in columns
    assert "policy --na mean ; 2 rows had a missing or non-numeric cell" in columns
    assert page.all("img", alt="histogram of each column")
    # a row's detail: its features by column name
    assert "0000000001 class 1 (id 1) · 12 bytes npy float32, shape 3: min 1, max 5.929, " \
        "mean 2.976, std 2.127 a 2 b 5.92857 city 1 " in columns
    assert len(page.all("button", **{"class": "card"})) == 8


def test_binary_page_plots_the_first_records_of_each_field(tmp_path):
    dump = tmp_path / "imu.bin"
    write_imu(dump, 120, "little")
    out = tmp_path / "imu.lmdb"
    run("pack", dump, "--spec", "imu", "--to", "lmdb", "-o", out, "-q")
    page = view_page(out, tmp_path / "view.html")
    assert "The first 120 records" in page.section("records")
    assert page.all("img", alt="the first records of each field")
    assert "accel.npy float32, shape 3: min" in page.section("records")  # in a detail
    assert "status.npy uint16, shape scalar: min 0, max 0, mean 0, std 0 0 " in \
        page.section("records")


def test_audio_sample_shows_a_waveform(tmp_path):
    folder = tmp_path / "wavs" / "yes"
    folder.mkdir(parents=True)
    with wave.open(str(folder / "a.wav"), "wb") as file:
        file.setnchannels(1)
        file.setsampwidth(2)
        file.setframerate(8000)
        file.writeframes((np.sin(np.arange(4000) / 10) * 9000).astype(np.int16).tobytes())
    run("pack", tmp_path / "wavs", "--spec", "pcm16", "--to", "hdf5", "-o", tmp_path / "w.h5",
        "-q")
    page = view_page(tmp_path / "w.h5", tmp_path / "view.html")
    plots = [img for img in page.all("img") if img.get("alt", "").startswith("waveform of")]
    assert len(plots) == 1 and plots[0]["src"].startswith("data:image/png;base64,")


def test_page_of_a_dataset_in_object_storage(planted, s3, tmp_path):
    upload_folder(packed(planted, "webdataset"), s3, "wds")
    page = view_page(f"s3://{s3}/wds", tmp_path / "view.html", "--cache-dir", tmp_path / "c")
    assert len(page.all("img", **{"class": "thumb"})) == 3 * 8
    assert "c0/000 (c0), c1/dup (c1)" in page.section("problems")


def test_not_a_dataset_is_a_clear_error(tmp_path):
    (tmp_path / "folder").mkdir()
    result = run("view", tmp_path / "folder", "-o", tmp_path / "v.html", expect=1)
    assert "folder" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "v.html").exists()


def test_output_in_a_missing_folder_is_a_clear_error(planted, tmp_path):
    out = tmp_path / "nowhere" / "v.html"
    result = run("view", packed(planted, "webdataset"), "-o", out, expect=2)
    assert f"{out}: its folder {out.parent} does not exist" in result.output


def sample(key: str, label: int, digest: str = "", size=(64, 64), grey=120.0, spread=90):
    return SampleFacts(key=key, label=label, bytes=100, digest=digest or key, width=size[0],
                       height=size[1], brightness=grey, spread=spread)


def test_problems_small_classes_odd_sizes_and_constant_images():
    samples = [sample(f"a{i}", 0) for i in range(150)] + [sample("b0", 1)] + [
        sample("wide", 0, size=(400, 40)), sample("tiny", 0, size=(8, 8)),
        sample("grey", 0, grey=128, spread=1), sample("again", 0, digest="a1")]
    facts = Facts(total=len(samples), samples=samples)
    found = {p.kind: p for p in find_problems(facts, ["a", "b", "c"], [154, 1, 0])}
    assert found["Small classes"].entries == [("b", 1), ("c", 0)]
    assert {s.key for s in found["Extreme sizes or aspect ratios"].entries} == {"wide", "tiny"}
    assert [s.key for s in found["Constant images"].entries] == ["grey"]
    assert [[s.key for s in g] for g in found["Duplicate payloads"].entries] == [["a1", "again"]]
    assert "Near-black images" not in found
    assert "The same payload under different classes" not in found


def test_help_explains_every_option_with_an_example():
    text = run("view", "--help").output
    for option in ("--per-class", "--max-samples", "--seed", "-o, --output"):
        assert option in text
    assert "packer view ./images-wds -o view.html" in text
