"""The pack-time transform: --resize, --resize-mode, --encode."""

import io
import json
import tarfile

import h5py
import numpy as np
import pytest
from PIL import Image

import packer
from conftest import image_bytes, run
from packer.formats import FORMAT_NAMES
from packer.images import decode_image
from packer.read.dataset import iter_samples, load_manifest


def _folder(tmp_path, sizes=((40, 30), (30, 50), (64, 64))):
    root = tmp_path / "src"
    for cls in ("a", "b"):
        (root / cls).mkdir(parents=True)
        for i, size in enumerate(sizes):
            (root / cls / f"{i}.jpg").write_bytes(image_bytes(i + 10 * (cls == "b"), size=size))
    return root


def _images(path):
    return {s["__key__"]: s for s in iter_samples(path)}


def _size(value) -> tuple[int, int]:
    return Image.open(io.BytesIO(value)).size


@pytest.mark.parametrize(("rule", "expected"), [
    ("20", {(40, 30): (27, 20), (30, 50): (20, 33), (64, 64): (20, 20)}),
    ("max:40", {(40, 30): (40, 30), (30, 50): (24, 40), (64, 64): (40, 40)}),
])
def test_resize_by_side_keeps_the_aspect(tmp_path, rule, expected):
    root = _folder(tmp_path)
    run("pack", root, "-o", tmp_path / "out", "--resize", rule, "-q")
    for i, (before, after) in enumerate(expected.items()):
        assert _size(_images(tmp_path / "out")[f"a/{i}"]["jpg"]) == after, before


@pytest.mark.parametrize("mode", ["crop", "pad", "stretch"])
def test_exact_size_in_every_mode(tmp_path, mode):
    root = _folder(tmp_path)
    run("pack", root, "-o", tmp_path / "out", "--resize", "24x16", "--resize-mode", mode,
        "--encode", "raw", "-q")
    samples = _images(tmp_path / "out")
    assert {np.load(io.BytesIO(s["rgb.npy"])).shape for s in samples.values()} == {(16, 24, 3)}
    tall = np.load(io.BytesIO(samples["a/1"]["rgb.npy"]))  # 30x50 into 24x16
    if mode == "pad":  # scaled to 10x16, centred: black columns at both sides
        assert tall[:, :6].max() == 0 and tall[:, -6:].max() == 0
    else:
        assert tall[:, :6].max() > 0


def test_raw_pixels_are_the_loaders_upright_rgb(tmp_path):
    """EXIF orientation, CMYK, palette and 16-bit images become the pixels the loader
    decodes today."""
    root = tmp_path / "src" / "c"
    root.mkdir(parents=True)
    rng = np.random.default_rng(0)
    upright = Image.fromarray(rng.integers(0, 255, (20, 30, 3), dtype=np.uint8))
    exif = Image.Exif()
    exif[0x0112] = 6  # stored rotated: shown after turning 90 degrees clockwise
    upright.transpose(Image.Transpose.ROTATE_90).save(root / "turned.jpg", exif=exif)
    upright.convert("CMYK").save(root / "cmyk.jpg")
    upright.convert("P").save(root / "palette.png")
    Image.fromarray(rng.integers(0, 65535, (20, 30), dtype=np.uint16)).save(root / "deep.png")
    run("pack", tmp_path / "src", "-o", tmp_path / "out", "--encode", "raw", "-q")
    stored = _images(tmp_path / "out")
    for name in ("turned", "cmyk", "palette", "deep"):
        original = next((tmp_path / "src" / "c").glob(f"{name}.*"))
        expected = np.asarray(decode_image(original.read_bytes(), None, original.suffix[1:]))
        pixels = np.load(io.BytesIO(stored[f"c/{name}"]["rgb.npy"]))
        assert pixels.dtype == np.uint8 and np.array_equal(pixels, expected), name
    assert np.load(io.BytesIO(stored["c/turned"]["rgb.npy"])).shape == (20, 30, 3)


def test_manifest_records_the_transform_and_hdf5_holds_one_array(tmp_path):
    root = _folder(tmp_path)
    run("pack", root, "--to", "hdf5", "-o", tmp_path / "out.h5", "--resize", "16x16",
        "--encode", "raw", "-q")
    manifest = load_manifest(tmp_path / "out.h5")
    assert manifest["transform"]["encode"] == "raw"
    assert manifest["transform"]["size"] == [16, 16]
    assert manifest["fields"]["rgb.npy"]["shape"] == [16, 16, 3]
    assert manifest["options"]["resize"] == "16x16"
    with h5py.File(tmp_path / "out.h5") as file:
        assert file["rgb.npy"].shape == (6, 16, 16, 3) and file["rgb.npy"].dtype == np.uint8
    run("verify", tmp_path / "out.h5", "-q")
    (root / "a" / "notes.txt").write_text("a sample without an image")
    refused = run("pack", root, "--to", "hdf5", "-o", tmp_path / "two.h5", "--resize", "16x16",
                  "--encode", "raw", "-q", expect=1).output
    assert "sample 'a/notes' has no rgb.npy" in refused


def test_a_pack_without_the_options_is_unchanged(tmp_path, image_folder):
    """No transform: files stored byte for byte, no transform entry, the same parts as an
    explicit --encode keep."""
    run("pack", image_folder, "-o", tmp_path / "plain", "-q")
    run("pack", image_folder, "-o", tmp_path / "keep", "--encode", "keep", "-q")
    plain, keep = load_manifest(tmp_path / "plain"), load_manifest(tmp_path / "keep")
    assert "transform" not in plain and "resize" not in plain["options"]
    assert [p["sha256"] for p in plain["parts"]] == [p["sha256"] for p in keep["parts"]]
    with tarfile.open(tmp_path / "plain" / plain["parts"][0]["name"]) as tar:
        member = next(m for m in tar if m.name.endswith("plain.jpg"))
        stored = tar.extractfile(member).read()
    assert stored == (image_folder / member.name).read_bytes()
    assert "re-encoded" not in run("verify", tmp_path / "plain", "--against", image_folder,
                                   "-q").output


def test_workers_transform_the_same_bytes(tmp_path, image_folder):
    for workers in ("1", "2"):
        run("pack", image_folder, "-o", tmp_path / workers, "--resize", "12", "--encode",
            "webp", "--workers", workers, "-q")
    one, two = load_manifest(tmp_path / "1"), load_manifest(tmp_path / "2")
    assert [p["sha256"] for p in one["parts"]] == [p["sha256"] for p in two["parts"]]
    assert {n for n in one["fields"]} >= {"webp", "json", "txt"}


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_verify_against_compares_the_transformed_source(tmp_path, image_folder, fmt):
    out = tmp_path / ("out.h5" if fmt == "hdf5" else "out")
    size = "16" if fmt == "hdf5" else "16x16"  # HDF5 keeps fixed-size pixels for every sample
    run("pack", image_folder, "--to", fmt, "-o", out, "--resize", size, "--encode", "raw",
        "-q")
    result = run("verify", out, "--against", image_folder, "-q")
    assert f"re-encoded when packed (--resize {size} --encode raw)" in result.output
    (image_folder / "cat" / "plain.jpg").write_bytes(image_bytes(99))
    failed = run("verify", out, "--against", image_folder, "-q", expect=1).output
    assert "cat/plain.jpg: the stored rgb.npy differs" in failed


def test_unpack_writes_stored_images_with_their_new_extension(tmp_path, image_folder):
    run("pack", image_folder, "-o", tmp_path / "out", "--encode", "jpeg:80", "-q")
    result = run("unpack", tmp_path / "out", "-o", tmp_path / "back")
    assert "re-encoded when packed (--encode jpeg:80)" in result.output
    assert (tmp_path / "back" / "cat" / "mask.jpg").is_file()
    assert not (tmp_path / "back" / "cat" / "mask.png").exists()
    assert Image.open(tmp_path / "back" / "cat" / "mask.jpg").format == "JPEG"
    assert json.loads((tmp_path / "back" / "cat" / "plain.json").read_text()) == {"cls": "cat"}
    run("pack", image_folder, "-o", tmp_path / "raw", "--encode", "raw", "-q")
    run("unpack", tmp_path / "raw", "-o", tmp_path / "raw-back", "-q")
    assert np.load(tmp_path / "raw-back" / "dog" / "plain.rgb.npy").dtype == np.uint8


def test_an_image_that_cannot_be_transformed_is_skipped_with_its_reason(tmp_path):
    root = _folder(tmp_path)
    (root / "a" / "bad.jpg").write_bytes(b"\xff\xd8\xff" + bytes(300) + b"\xff\xd9")
    run("pack", root, "-o", tmp_path / "out", "--resize", "8", "--check", "none", "-q")
    skipped = load_manifest(tmp_path / "out")["skipped"]
    assert [e["path"] for e in skipped] == ["a/bad.jpg"]
    assert "cannot transform the image" in skipped[0]["reason"]


def test_an_image_too_big_to_transform_is_skipped_with_its_reason(tmp_path):
    root = _folder(tmp_path)
    Image.new("1", (14000, 14000)).save(root / "a" / "bomb.png")  # 196 MP, 24 KB
    Image.new("RGB", (3000, 2)).save(root / "a" / "thin.png")  # 2000 high: 3,000,000 wide
    run("pack", root, "-o", tmp_path / "out", "--resize", "2000", "-q")
    skipped = {e["path"]: e["reason"] for e in load_manifest(tmp_path / "out")["skipped"]}
    assert "decompression bomb" in skipped["a/bomb.png"]
    assert "would make it 3000000x2000" in skipped["a/thin.png"]
    assert len(_images(tmp_path / "out")) == 6


def _shared_stem(tmp_path, *names):
    root = tmp_path / "pairs"
    (root / "a").mkdir(parents=True)
    for i, name in enumerate(names):
        image = Image.new("RGB", (60, 40), (9 + 40 * i, 99, 200))
        image.save(root / "a" / name, "TIFF" if name.endswith(".tif") else None)
    (root / "a" / "x.json").write_text("{}")
    Image.new("RGB", (50, 50)).save(root / "a" / "y.png")
    return root


def test_two_images_of_a_sample_stored_alike_are_skipped_together(tmp_path):
    root = _shared_stem(tmp_path, "x.png", "x.tif")
    for encode, advice in [("keep", "without --resize and --encode"), ("jpeg", "without")]:
        out = tmp_path / encode
        run("pack", root, "--group-by-stem", "--resize", "32", "--encode", encode, "-o", out,
            "-q")
        skipped = {e["path"]: e["reason"] for e in load_manifest(out)["skipped"]}
        assert set(skipped) == {"a/x.png", "a/x.tif", "a/x.json"}
        assert "would both be stored as" in skipped["a/x.tif"] and advice in skipped["a/x.tif"]
        run("verify", out, "--against", root)
    (root / "a" / "x.cls").write_text("7")  # a file, where no class comes from folders
    run("pack", root, "--group-by-stem", "--unlabelled", "--encode", "png", "-o",
        tmp_path / "unlabelled", "-q")
    assert {e["path"] for e in load_manifest(tmp_path / "unlabelled")["skipped"]} == {
        "a/x.png", "a/x.tif", "a/x.json", "a/x.cls"}
    jpeg_png = _shared_stem(tmp_path / "j", "x.jpg", "x.png")
    run("pack", jpeg_png, "--group-by-stem", "--encode", "png", "-o", tmp_path / "png", "-q")
    reason = load_manifest(tmp_path / "png")["skipped"][-1]["reason"]
    assert "pack with --encode keep" in reason


def test_verify_against_finds_the_source_of_each_stored_image(tmp_path):
    root = _shared_stem(tmp_path, "x.jpg", "x.tif")  # stored as x.jpg and x.png
    run("pack", root, "--group-by-stem", "--resize", "32", "-o", tmp_path / "out", "-q")
    assert set(_images(tmp_path / "out")["a/x"]) >= {"jpg", "png", "json"}
    assert "OK" in run("verify", tmp_path / "out", "--against", root).output


def test_unpack_keeps_files_of_a_shared_stem_apart(tmp_path):
    root = _shared_stem(tmp_path, "x.png", "x.tif")  # packed apart: a/x~png, a/x~tif
    for encode, names in [("keep", {"x.png", "x.tif.png"}),
                          ("raw", {"x.png.rgb.npy", "x.tif.rgb.npy"})]:
        run("pack", root, "--resize", "32", "--encode", encode, "-o", tmp_path / encode, "-q")
        run("unpack", tmp_path / encode, "-o", tmp_path / f"{encode}-back", "-q")
        written = {p.name for p in (tmp_path / f"{encode}-back" / "a").iterdir()}
        assert written >= names | {"x.json"}, written


def test_a_bad_image_stops_a_fail_pack_with_a_readable_reason(tmp_path):
    root = _folder(tmp_path)
    (root / "a" / "bad.png").write_bytes(b"not a png at all" * 20)
    output = run("pack", root, "-o", tmp_path / "out", "--resize", "8", "--check", "none",
                 "--on-error", "fail", expect=1).output
    assert "a/bad.png: cannot transform the image" in output and "object at 0x" not in output


def test_bad_transform_options_are_refused(tmp_path):
    root = _folder(tmp_path)
    for args, message in [(("--resize", "0x4"), "--resize 0x4"),
                          (("--encode", "gif"), "--encode gif"),
                          (("--encode", "png:80"), "--encode png:80"),
                          (("--encode", "jpeg:\u00b2"), "--encode jpeg:\u00b2"),
                          (("--encode", "jpeg:"), "--encode jpeg:"),
                          (("--resize-mode", "pad"), "only with --resize"),
                          (("--resize", "max:40", "--resize-mode", "pad"),
                           "applies only to an exact --resize WxH"),
                          (("--resize", "32", "--resize-mode", "crop"),
                           "applies only to an exact --resize WxH"),
                          (("--resize", "10000x10000", "--resize-mode", "stretch"),
                           "more than Pillow's limit")]:
        assert message in run("pack", root, "-o", tmp_path / "x", *args, expect=2).output
    (tmp_path / "t.csv").write_text("a,y\n1,0\n2,1\n")
    refused = run("pack", tmp_path / "t.csv", "-o", tmp_path / "t", "--label-column", "y",
                  "--resize", "8", expect=2).output
    assert "--resize (only for folders" in refused


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_raw_datasets_read_as_the_stored_pixels(tmp_path, fmt):
    root = _folder(tmp_path)
    out = tmp_path / ("out.h5" if fmt == "hdf5" else "out")
    run("pack", root, "--to", fmt, "-o", out, "--resize", "16x12", "--encode", "raw", "-q")
    stored = {k: np.load(io.BytesIO(s["rgb.npy"])) if isinstance(s["rgb.npy"], bytes)
              else s["rgb.npy"] for k, s in _images(out).items()}
    ds = packer.open_dataset(out)
    assert ds.image_field == "rgb.npy"
    for sample in ds:
        assert sample["rgb.npy"].shape == (3, 12, 16)
        assert np.array_equal(sample["rgb.npy"].permute(1, 2, 0).numpy(), stored[sample["__key__"]])
    as_stored = next(iter(packer.open_dataset(out, decode="raw")))
    assert np.array_equal(np.load(io.BytesIO(as_stored["rgb.npy"])), stored[as_stored["__key__"]])
    batch = next(iter(packer.DataLoader(packer.open_dataset(out, decode="raw"), batch_size=4,
                                        num_workers=2)))
    assert all(type(value) is bytes for value in batch["rgb.npy"])  # .npy files in every format
    assert [np.load(io.BytesIO(v)).shape for v in batch["rgb.npy"]] == [(12, 16, 3)] * 3


def test_every_image_the_check_decodes_is_transformed(tmp_path):
    """.jfif, .jpe, .tga, .ico and .pcx were left as they were, with a summary saying every
    image was re-encoded."""
    folder = tmp_path / "images" / "a"
    folder.mkdir(parents=True)
    made = {"jfif": "JPEG", "jpe": "JPEG", "tga": "TGA", "ico": "ICO", "pcx": "PCX",
            "png": "PNG"}
    for i, (extension, fmt) in enumerate(made.items()):
        image = Image.fromarray(np.full((40, 48, 3), 30 * i, np.uint8))
        out = io.BytesIO()
        image.save(out, fmt)
        (folder / f"{i}.{extension}").write_bytes(out.getvalue())
    run("pack", tmp_path / "images", "-o", tmp_path / "o", "--resize", "16x16", "-q")
    samples = list(iter_samples(tmp_path / "o"))
    assert len(samples) == len(made)
    for sample in samples:
        [field] = [name for name in sample if name not in ("__key__", "cls")]
        assert field in ("jpg", "png"), sample["__key__"]
        assert decode_image(sample[field], None).size == (16, 16)
    run("verify", tmp_path / "o", "--against", tmp_path / "images")
