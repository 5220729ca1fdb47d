"""Images of every mode become the same kind of uint8 RGB tensor."""

import io

import numpy as np
import pytest
from PIL import Image

from packer.read.decode import Decoder


def encoded(image: Image.Image, fmt: str, **options) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


def rgb8(data: bytes, field="png", **options):
    return Decoder("rgb8", **options)({"__key__": "k", field: data})[field]


def test_grayscale_palette_cmyk_and_rgba_become_rgb():
    gray = Image.fromarray(np.full((4, 5), 100, np.uint8))
    assert rgb8(encoded(gray, "PNG")).shape == (3, 4, 5)
    assert rgb8(encoded(gray, "PNG")).unique().tolist() == [100]
    cmyk = Image.new("CMYK", (5, 4), (0, 255, 255, 0))  # pure red in CMYK
    assert rgb8(encoded(cmyk, "JPEG"), "jpg")[:, 0, 0].tolist()[0] > 200
    rgba = Image.new("RGBA", (5, 4), (10, 20, 30, 0))
    assert rgb8(encoded(rgba, "PNG"))[:, 0, 0].tolist() == [10, 20, 30]
    palette = Image.new("P", (5, 4), 3)
    assert rgb8(encoded(palette, "GIF"), "gif").shape == (3, 4, 5)


def test_sixteen_bit_images_are_scaled_not_clipped():
    values = np.array([[0, 32768, 65535, 1000]], np.uint16)
    image = Image.fromarray(values)
    tensor = rgb8(encoded(image, "PNG"))
    assert tensor[0, 0].tolist() == [0, 128, 255, 3]
    assert tensor.dtype.is_floating_point is False


def test_exif_orientation_is_applied():
    image = Image.new("RGB", (6, 3), (200, 0, 0))
    exif = image.getexif()
    exif[0x0112] = 6  # stored sideways: rotate 90 degrees to view
    tensor = rgb8(encoded(image, "JPEG", exif=exif.tobytes()), "jpg")
    assert tensor.shape == (3, 6, 3)


def test_resize_makes_images_stack_and_other_fields_decode():
    big = encoded(Image.new("RGB", (40, 30), (1, 2, 3)), "JPEG")
    sample = Decoder("rgb8", image_size=(8, 12))({
        "__key__": "k", "jpg": big, "cls": b"7", "json": b'{"a": 1}', "txt": b"hi",
        "npy": encoded_npy(np.arange(3)), "bin": b"\x00"})
    assert sample["jpg"].shape == (3, 8, 12)
    assert sample["cls"] == 7 and sample["json"] == {"a": 1} and sample["txt"] == "hi"
    assert sample["npy"].tolist() == [0, 1, 2] and sample["bin"] == b"\x00"
    assert Decoder("pil")({"__key__": "k", "jpg": big})["jpg"].size == (40, 30)
    assert Decoder("raw")({"__key__": "k", "jpg": big})["jpg"] == big
    custom = Decoder("raw", decoders={"bin": len})({"__key__": "k", "bin": b"abc"})
    assert custom["bin"] == 3


def encoded_npy(array) -> bytes:
    out = io.BytesIO()
    np.save(out, array)
    return out.getvalue()


def test_unknown_decode_mode_is_refused():
    with pytest.raises(ValueError, match="use one of rgb8, pil, raw"):
        Decoder("rgb16")


def test_an_image_named_for_another_format_still_decodes():
    png = encoded(Image.new("RGB", (3, 2), (5, 6, 7)), "PNG")
    assert rgb8(png, "jpg")[:, 0, 0].tolist() == [5, 6, 7]


@pytest.mark.parametrize("size", [(40, 30), (32, 32), (70, 90)])
def test_resizing_matches_pil_bilinear_within_one_level(size):
    pixels = np.random.default_rng(0).integers(0, 256, (57, 83, 3), np.uint8)
    image = Image.fromarray(pixels)
    expected = np.asarray(image.resize((size[1], size[0]), Image.BILINEAR)).astype(int)
    tensor = rgb8(encoded(image, "PNG"), image_size=size)
    assert tensor.shape == (3, *size)
    assert np.abs(tensor.permute(1, 2, 0).numpy().astype(int) - expected).max() <= 1
