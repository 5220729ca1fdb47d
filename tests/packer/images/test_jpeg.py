"""JPEGs decoded through libjpeg-turbo straight give Pillow's pixels, bit for bit; those
it cannot take fall back to Pillow, and damaged ones still fail."""

import io

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from packer.images import decode_image
from packer.images.jpeg import exif_orientation, jpeg_rgb
from packer.read.decode import Decoder
from packer.read.pixels import rgb8_tensor


def photo(width: int, height: int, seed: int = 0) -> Image.Image:
    """Smooth colour blobs with some edges, like a small photo."""
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, (max(2, height // 8), max(2, width // 8), 3), np.uint8)
    image = Image.fromarray(coarse).resize((width, height), Image.BICUBIC)
    image.paste((250, 10, 10), (width // 4, height // 4, width // 2, height // 3))
    return image


def jpeg(image: Image.Image, **options) -> bytes:
    out = io.BytesIO()
    image.save(out, "JPEG", quality=90, **options)
    return out.getvalue()


def pillow_rgb8(data: bytes, size, reduced: bool) -> torch.Tensor:
    """What the loader gave before it called libjpeg-turbo itself: Pillow's decode (its
    draft when reduced), then F.interpolate's antialiased bilinear resize."""
    image = decode_image(data, size, "jpg", resize=False, reduced=reduced)
    pixels = torch.from_numpy(np.array(image)).permute(2, 0, 1)
    if size is None or tuple(pixels.shape[1:]) == size:
        return pixels
    return F.interpolate(pixels[None], size=size, mode="bilinear", antialias=True)[0]


KINDS = {
    "baseline 4:2:0": lambda: jpeg(photo(150, 100)),
    "4:4:4": lambda: jpeg(photo(150, 100), subsampling=0),
    "progressive": lambda: jpeg(photo(150, 100), progressive=True),
    "grayscale": lambda: jpeg(photo(150, 100).convert("L")),
    "odd sides": lambda: jpeg(photo(131, 67, seed=1)),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("size", [None, (32, 32), (24, 16), (64, 64), (120, 200)])
@pytest.mark.parametrize("reduced", [True, False])
def test_libjpeg_turbo_gives_pillows_pixels(kind, size, reduced):
    data = KINDS[kind]()
    assert jpeg_rgb(data, None) is not None  # this path, not the fallback
    ours = rgb8_tensor(data, size, "jpg", reduced=reduced)
    assert torch.equal(ours, pillow_rgb8(data, size, reduced))
    laid_out = rgb8_tensor(data, size, "jpg", reduced=reduced, channels_last=True)
    assert torch.equal(laid_out, ours) and laid_out.permute(1, 2, 0).is_contiguous()


def test_the_reduced_scale_is_pillows_draft():
    data = jpeg(photo(150, 100))
    assert jpeg_rgb(data, 32).shape == (50, 75, 3)  # 1/2: 1/4 would be under 32 high
    assert jpeg_rgb(data, 12).shape == (13, 19, 3)  # 1/8, rounded up as libjpeg does
    assert jpeg_rgb(data, 64).shape == (100, 150, 3)


@pytest.mark.parametrize("orientation", range(1, 9))
def test_every_exif_orientation_is_applied_as_pillow_does(orientation):
    image = photo(40, 24, seed=orientation)
    exif = image.getexif()
    exif[0x0112] = orientation
    data = jpeg(image, exif=exif.tobytes())
    assert exif_orientation(data) == orientation
    for size, reduced in ((None, False), ((12, 12), True), ((16, 30), False)):
        assert torch.equal(rgb8_tensor(data, size, "jpg", reduced=reduced),
                           pillow_rgb8(data, size, reduced))
    upright = jpeg_rgb(data, None).shape[:2]
    assert upright == ((40, 24) if orientation >= 5 else (24, 40))


def test_a_jpeg_without_exif_has_no_orientation():
    assert exif_orientation(jpeg(photo(20, 10))) == 1


def test_cmyk_falls_back_to_pillow_and_comes_out_rgb():
    data = jpeg(photo(40, 30).convert("CMYK"))
    assert jpeg_rgb(data, None) is None
    pixels = Decoder("rgb8", image_size=16)({"__key__": "k", "jpg": data})["jpg"]
    assert pixels.shape == (3, 16, 16) and torch.equal(pixels, pillow_rgb8(data, (16, 16), True))


def test_damaged_jpegs_still_fail_and_other_formats_still_decode():
    data = jpeg(photo(150, 100))
    truncated = data[:len(data) // 2]
    assert jpeg_rgb(truncated, None) is None
    with pytest.raises(OSError, match="truncated"):
        rgb8_tensor(truncated, (32, 32), "jpg")
    with pytest.raises(OSError):
        rgb8_tensor(b"\xff\xd8\xff\xe0 not a jpeg at all", (32, 32), "jpg")
    png = io.BytesIO()
    photo(20, 10).save(png, "PNG")
    assert jpeg_rgb(png.getvalue(), None) is None
    assert rgb8_tensor(png.getvalue(), None, "jpg").shape == (3, 10, 20)


def test_the_resize_without_torchs_kernel_gives_the_same_pixels(monkeypatch):
    from packer.read import resize

    chw = torch.from_numpy(np.random.default_rng(0).integers(0, 256, (3, 40, 30), np.uint8))
    hwc = chw.permute(1, 2, 0).contiguous().permute(2, 0, 1)  # the same, channels last
    expected = F.interpolate(chw[None], size=(12, 9), mode="bilinear", antialias=True)[0]
    for kernel in (resize._RESIZE_KERNEL, None):
        monkeypatch.setattr(resize, "_RESIZE_KERNEL", kernel)
        for pixels in (chw, hwc):
            for channels_last in (True, False):
                out = resize.resized_tensor(pixels, (12, 9), channels_last=channels_last)
                assert torch.equal(out, expected)
                assert out.permute(1, 2, 0).is_contiguous() == channels_last
