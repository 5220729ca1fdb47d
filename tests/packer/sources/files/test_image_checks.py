"""Image inputs as other tools write them: the header check, `--check decode`, the
decoders' warnings per file, deterministic skip reasons, and the loader's decoding of
every raster format Pillow opens."""

import io
import json
import struct

import numpy as np
import pytest
from PIL import Image, ImageFile, TiffImagePlugin, features

import packer
from conftest import image_bytes, run
from packer.packing import pack
from packer.packing.options import PackOptions
from packer.read.decode import IMAGE_FIELDS, Decoder
from packer.sources.files.checks import PIL_FORMATS, check_input


def _pixels(seed: int = 0, size=(10, 12)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)


def _saved(image: Image.Image, fmt: str, **options) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


def _padded_bmp() -> bytes:
    """A BMP whose header says it is 1,000 bytes longer than it is (Pillow opens it)."""
    data = bytearray(_saved(Image.fromarray(_pixels()), "BMP"))
    data[2:6] = (len(data) + 1000).to_bytes(4, "little")
    return bytes(data)


def _tiff_with_a_tag_past_its_end() -> bytes:
    """A TIFF whose custom tag points past the end of the file: Pillow decodes the
    image and warns "Truncated File Read"."""
    info = TiffImagePlugin.ImageFileDirectory_v2()
    info[65000] = "x" * 40
    info.tagtype[65000] = 2
    data = bytearray(_saved(Image.fromarray(_pixels()), "TIFF", tiffinfo=info))
    ifd = int.from_bytes(data[4:8], "little")
    for entry in range(ifd + 2, ifd + 2 + 12 * int.from_bytes(data[ifd:ifd + 2], "little"), 12):
        if int.from_bytes(data[entry:entry + 2], "little") == 65000:
            data[entry + 8:entry + 12] = (len(data) + 5000).to_bytes(4, "little")
    return bytes(data)


def _deflate_tiff_with_bad_data() -> bytes:
    """A deflate-compressed TIFF whose strip is garbled: libtiff reports it on stderr."""
    data = bytearray(_saved(Image.fromarray(_pixels(size=(64, 64))), "TIFF",
                            compression="tiff_deflate"))
    with Image.open(io.BytesIO(bytes(data))) as image:
        start, size = image.tag_v2[273][0], image.tag_v2[279][0]
    data[start + 4:start + size - 2] = bytes(b ^ 0x55 for b in data[start + 4:start + size - 2])
    return bytes(data)


def test_the_header_check_knows_bigtiff_and_the_decode_overrules_a_header_doubt(tmp_path):
    folder = tmp_path / "odd"
    folder.mkdir()
    (folder / "big.tif").write_bytes(_saved(Image.fromarray(_pixels()), "TIFF", big_tiff=True))
    (folder / "padded.bmp").write_bytes(_padded_bmp())
    assert (folder / "big.tif").read_bytes()[:4] == b"II+\0"

    header = pack(folder, tmp_path / "h", PackOptions(progress=False))
    assert header["count"] == 1  # the BigTIFF; the header check still doubts the BMP
    assert [e["path"] for e in header["skipped"]] == ["padded.bmp"]
    assert "truncated BMP" in header["skipped"][0]["reason"]

    decoded = pack(folder, tmp_path / "d", PackOptions(check="decode", progress=False))
    assert decoded["count"] == 2 and decoded["skipped"] == []
    assert decoded["warnings"] == [{"path": "padded.bmp", "warnings": [
        f"truncated BMP: the header says {len(_padded_bmp()) + 1000} bytes, the file has "
        f"{len(_padded_bmp())}; Pillow decodes it"]}]


def test_a_file_pillow_cannot_decode_keeps_the_header_reason():
    data = bytearray(_padded_bmp())
    del data[60:]  # the pixels are gone too
    reason, warnings = check_input("bmp", bytes(data), "decode")
    assert reason.startswith("truncated BMP") and warnings == []
    assert check_input("tif", b"II+\0" + bytes(20), "header") == (None, [])
    assert "not a TIFF" in check_input("tif", b"IIII" + bytes(20), "header")[0]


@pytest.mark.parametrize("workers", [1, 2])
def test_decoder_warnings_are_listed_per_file_and_kept_off_stderr(workers, tmp_path, capfd):
    folder = tmp_path / "tiffs"
    folder.mkdir()
    (folder / "fine.tif").write_bytes(_saved(Image.fromarray(_pixels(1)), "TIFF"))
    (folder / "tag.tif").write_bytes(_tiff_with_a_tag_past_its_end())
    (folder / "garbled.tif").write_bytes(_deflate_tiff_with_bad_data())
    capfd.readouterr()
    result = run("pack", folder, "-o", tmp_path / "o", "--check", "decode", "-j", workers, "-q")
    stderr = capfd.readouterr().err
    manifest = packer.load_manifest(tmp_path / "o")
    assert manifest["count"] == 2
    assert [e["path"] for e in manifest["warnings"]] == ["tag.tif"]
    assert manifest["warnings"][0]["warnings"][0].startswith("Truncated File Read")
    [skipped] = manifest["skipped"]
    assert skipped["path"] == "garbled.tif"
    assert "ZIPDecode" in skipped["reason"]  # libtiff's own words, with the file they are of
    assert "ZIPDecode" not in stderr and "Truncated File Read" not in stderr
    assert "decoder warnings for 1 packed input:\n  tag.tif: Truncated File Read" in result.output
    assert "decoder warnings: 1\n  tag.tif: Truncated File Read" in run("inspect",
                                                                       tmp_path / "o").output
    assert json.loads(run("pack", folder, "-o", tmp_path / "j", "--check", "decode", "-q",
                          "--json").output)["warned"] == 1


def test_the_same_folder_packed_twice_writes_the_same_manifest(tmp_path):
    folder = tmp_path / "same"
    folder.mkdir()
    (folder / "fine.jpg").write_bytes(image_bytes(1))
    (folder / "garbled.jpg").write_bytes(b"\xff\xd8\xff" + bytes(range(256)) * 4 + b"\xff\xd9")
    (folder / "tag.tif").write_bytes(_tiff_with_a_tag_past_its_end())
    manifests = []
    for out in ("a", "b"):
        pack(folder, tmp_path / out, PackOptions(check="decode", progress=False))
        manifest = json.loads((tmp_path / out / "manifest.json").read_text())
        for varying in ("created", "manifest_sha256"):
            manifest.pop(varying)
        manifests.append(manifest)
    assert manifests[0] == manifests[1]
    [skipped] = manifests[0]["skipped"]
    assert skipped == {"path": "garbled.jpg",
                       "reason": "cannot decode the image: cannot identify image file"}


def _psd(pixels: np.ndarray) -> bytes:
    """A minimal uncompressed 8-bit RGB Photoshop file (Pillow reads PSD, not writes)."""
    height, width, _ = pixels.shape
    header = b"8BPS" + struct.pack(">H6xHIIHH", 1, 3, height, width, 8, 3)
    sections = struct.pack(">III", 0, 0, 0) + struct.pack(">H", 0)  # no extras; raw data
    return header + sections + pixels.transpose(2, 0, 1).tobytes()


_RGB_WRITERS = {  # field: bytes of _pixels() in that format, decoded exactly
    "tga": lambda px: _saved(Image.fromarray(px), "TGA"),
    "ico": lambda px: _saved(Image.fromarray(px), "ICO", sizes=[px.shape[1::-1]]),
    "pcx": lambda px: _saved(Image.fromarray(px), "PCX"),
    "ppm": lambda px: _saved(Image.fromarray(px), "PPM"),
    "sgi": lambda px: _saved(Image.fromarray(px), "SGI"),
    "qoi": lambda px: _saved(Image.fromarray(px), "QOI"),
    "dds": lambda px: _saved(Image.fromarray(px), "DDS"),
    "webp": lambda px: _saved(Image.fromarray(px), "WEBP", lossless=True),
    "jp2": lambda px: _saved(Image.fromarray(px), "JPEG2000"),
    "psd": _psd,
}


@pytest.mark.parametrize("field", sorted(_RGB_WRITERS))
def test_rgb8_decodes_every_raster_format_pillow_opens(field):
    if field == "jp2" and not features.check("jpg_2000"):
        pytest.skip("this Pillow has no OpenJPEG")
    pixels = _pixels()
    decoded = Decoder("rgb8")({"__key__": "k", field: _RGB_WRITERS[field](pixels)})
    assert decoded[field].shape == (3, 12, 10)
    assert np.array_equal(decoded[field].permute(1, 2, 0).numpy(), pixels)


def test_rgb8_conversions_hold_for_the_other_formats():
    if not features.check("jpg_2000"):
        pytest.skip("this Pillow has no OpenJPEG")
    pixels = _pixels()
    rgba = Image.fromarray(np.dstack([pixels, np.full(pixels.shape[:2], 7, np.uint8)]))
    deep = Image.fromarray(np.arange(120, dtype=np.uint16).reshape(12, 10) * 500)
    decode = Decoder("rgb8")
    tga = decode({"__key__": "k", "tga": _saved(rgba, "TGA")})["tga"]
    assert np.array_equal(tga.permute(1, 2, 0).numpy(), pixels)  # alpha dropped
    j2k = decode({"__key__": "k", "j2k": _saved(deep, "JPEG2000")})["j2k"]
    assert np.array_equal(j2k[0].numpy(), np.asarray(deep) >> 8)  # 16-bit: scaled
    cmyk = decode({"__key__": "k", "tiff": _saved(Image.fromarray(pixels).convert("CMYK"),
                                                  "TIFF")})["tiff"]
    assert np.abs(cmyk.permute(1, 2, 0).numpy().astype(int) - pixels).max() <= 1


def test_the_image_fields_are_every_raster_format_pillow_opens():
    Image.init()
    not_images = {"EPS", "MPEG", "IPTC"}  # Ghostscript's; a video; metadata
    for extension, name in Image.registered_extensions().items():
        factory = Image.OPEN.get(name, (None,))[0]
        if factory is None or name in not_images or (
                isinstance(factory, type) and issubclass(factory, ImageFile.StubImageFile)):
            continue
        assert PIL_FORMATS.get(extension[1:]) == name, extension
    assert {"h5", "npy", "json", "txt", "cls", "eps"}.isdisjoint(IMAGE_FIELDS)
    assert set(PIL_FORMATS) == IMAGE_FIELDS


def test_check_decode_decodes_the_new_formats(tmp_path):
    folder = tmp_path / "more"
    folder.mkdir()
    (folder / "a.tga").write_bytes(_RGB_WRITERS["tga"](_pixels()))
    (folder / "b.psd").write_bytes(_psd(_pixels()))
    (folder / "c.pcx").write_bytes(_RGB_WRITERS["pcx"](_pixels())[:200])  # cut short
    manifest = pack(folder, tmp_path / "o", PackOptions(check="decode", progress=False))
    assert manifest["count"] == 2
    assert [(e["path"], e["reason"].split(":")[0]) for e in manifest["skipped"]] == [
        ("c.pcx", "cannot decode the image")]


def test_the_summary_says_which_images_were_checked_by_their_header_only(tmp_path):
    folder = tmp_path / "images" / "a"
    folder.mkdir(parents=True)
    for i in range(3):
        (folder / f"{i}.jpg").write_bytes(image_bytes(i, size=(40, 30)))
    good = image_bytes(9, size=(40, 30))
    (folder / "broken.jpg").write_bytes(good[:200] + bytes(len(good) - 202) + good[-2:])
    header = run("pack", tmp_path / "images", "-o", tmp_path / "h").output
    assert "checked by their header only: 4 images" in header and "--check decode" in header
    decoded = run("pack", tmp_path / "images", "-o", tmp_path / "d", "--check", "decode").output
    assert "header only" not in decoded and "broken.jpg" in decoded


def test_check_decode_decodes_as_the_loader_does_exif_included(tmp_path):
    """A JPEG whose Exif segment is damaged: Pillow loads its pixels, but the loader,
    which applies the Exif orientation, cannot; --check decode skips it as the loader
    would fail on it every epoch."""
    exif = Image.Exif()
    exif[0x0112] = 6
    out = io.BytesIO()
    Image.fromarray(np.full((30, 40, 3), 90, np.uint8)).save(out, "JPEG", exif=exif.tobytes())
    data = bytearray(out.getvalue())
    start = data.index(b"Exif\0\0") + 6
    data[start:start + 2] = b"XX"  # neither II nor MM: not a TIFF header
    folder = tmp_path / "images" / "a"
    folder.mkdir(parents=True)
    (folder / "bad-exif.jpg").write_bytes(bytes(data))
    (folder / "good.jpg").write_bytes(image_bytes(1))
    summary = run("pack", tmp_path / "images", "-o", tmp_path / "o", "--check", "decode").output
    assert "a/bad-exif.jpg: cannot decode the image" in summary
    ds = packer.open_dataset(tmp_path / "o", image_size=8, on_error="raise")
    assert len(list(ds)) == 1
