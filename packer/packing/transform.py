"""The pack-time transform: images stored at the training resolution, re-encoded.

    --resize 64           the shorter side made 64 (the aspect kept)
    --resize 64x48        exactly 64 wide, 48 high: --resize-mode crop (scale to cover, centre
                          crop), pad (scale to fit, black borders) or stretch
    --resize max:128      the longer side at most 128 (smaller images are kept as they are)
    --encode keep         the image's own format (JPEG, PNG, WebP; others as PNG)
    --encode jpeg[:Q]     JPEG at quality Q (default 90); png; webp (quality 90)
    --encode raw          uint8 pixels, height x width x 3, as a .npy array in the field
                          `rgb.npy` (numpy.load reads it); with an exact NxM size every sample
                          has the same shape, which HDF5 stores as one (N, H, W, 3) array

Images are converted as the loader converts them (EXIF orientation applied; grayscale,
palette, CMYK, RGBA and 16-bit brought to 8-bit RGB) and resized with the loader's
antialiased bilinear filter. The transform runs in the packing workers, on each chunk of
read samples; an image it cannot decode is skipped with the reason. Without --resize and
--encode nothing is transformed: the files are stored byte for byte.
"""

import io
import re
from dataclasses import dataclass

from packer.errors import UsageProblem
from packer.sample import KEY, PIL_FORMATS, RAW_IMAGE_FIELD, restored_path

RESIZE_MODES = ("crop", "pad", "stretch")
ENCODINGS = ("keep", "jpeg", "png", "webp", "raw")
JPEG_QUALITY = 90
WEBP_QUALITY = 90
# --encode keep: the PIL format each extension is saved in, and the field it is stored as
_KEPT = {"jpg": ("JPEG", "jpg"), "jpeg": ("JPEG", "jpeg"), "png": ("PNG", "png"),
         "webp": ("WEBP", "webp")}
_ENCODED = {"jpeg": ("JPEG", "jpg"), "png": ("PNG", "png"), "webp": ("WEBP", "webp")}
_LABEL = "cls"  # the field a sample's class id is in (an int, no file of its own)
_SIZE = re.compile(r"^(?:(max:)?(\d+)|(\d+)x(\d+))$", re.ASCII)
_QUALITY = re.compile(r"\d{1,3}", re.ASCII)


@dataclass(frozen=True)
class Transform:
    """What happens to every image of a pack: a size rule and an encoder."""

    resize: str | None = None  # "64", "64x48", "max:128"
    resize_mode: str = "crop"
    encode: str = "keep"  # "keep", "jpeg", "jpeg:85", "png", "webp", "raw"

    def __post_init__(self):
        if self.resize is not None:
            match = _SIZE.match(self.resize.strip().lower())
            if not match or any(int(n) == 0 for n in match.groups() if n and n.isdigit()):
                raise UsageProblem(f"--resize {self.resize}: give N (the shorter side), "
                                   "WxH (exact, e.g. 64x64) or max:N (the longer side at "
                                   "most N), with sizes of at least 1")
            self._check_exact_size()
        if self.resize_mode not in RESIZE_MODES:
            raise UsageProblem(f"--resize-mode {self.resize_mode}: use one of "
                               f"{', '.join(RESIZE_MODES)}")
        name, colon, quality = self.encode.partition(":")
        if name not in ENCODINGS or (colon and (name != "jpeg" or not _QUALITY.fullmatch(quality)
                                                or not 1 <= int(quality) <= 100)):
            raise UsageProblem(f"--encode {self.encode}: use keep, jpeg, jpeg:QUALITY (1 to "
                               "100), png, webp or raw")

    @property
    def active(self) -> bool:
        return self.resize is not None or self.encode != "keep"

    def _check_exact_size(self) -> None:
        """An exact WxH beyond Pillow's guard would skip every image: refused at once."""
        try:
            _safe(self.exact_size() or (1, 1), self.resize)
        except ValueError as err:
            raise UsageProblem(f"{err}: every image would be skipped") from None

    def exact_size(self) -> tuple[int, int] | None:
        """(width, height) every image gets, when the rule fixes it."""
        match = _SIZE.match(self.resize.strip().lower()) if self.resize else None
        return (int(match[3]), int(match[4])) if match and match[3] else None

    def record(self) -> dict:
        """What the manifest says of the transform."""
        size = self.exact_size()
        return {"resize": self.resize, "resize_mode": self.resize_mode if size else None,
                "encode": self.encode, "filter": "bilinear, antialiased",
                "size": list(size) if size else None,
                "field": RAW_IMAGE_FIELD if self.encode == "raw" else None}

    def fields(self, specs: dict) -> dict:
        """The source's field specs as the transform stores them."""
        out = {}
        for name, spec in specs.items():
            if _kind(name) not in PIL_FORMATS:
                out[name] = spec
            elif self.encode == "raw":
                size = self.exact_size()
                out[RAW_IMAGE_FIELD] = ({"dtype": "uint8", "shape": [size[1], size[0], 3]}
                                        if size else {"dtype": "bytes"})
            else:
                out[self._target(name)[1]] = spec
        return dict(sorted(out.items()))

    def stored_field(self, field: str) -> str:
        """The field an image of source field `field` is stored as."""
        return RAW_IMAGE_FIELD if self.encode == "raw" else self._target(field)[1]

    def _target(self, field: str) -> tuple[str, str]:
        """(PIL format, stored field) of an image field."""
        if self.encode == "keep":  # a JPEG by any extension (jfif, jpe) stays a JPEG
            jpeg = PIL_FORMATS.get(_kind(field)) == "JPEG"
            return _KEPT.get(_kind(field), ("JPEG", "jpg") if jpeg else ("PNG", "png"))
        return _ENCODED[self.encode.partition(":")[0]]

    def apply(self, outcomes: list[tuple[dict | None, list]]) -> list[tuple[dict | None, list]]:
        """A chunk of read samples (or skip entries), transformed; a sample whose image
        cannot be transformed becomes a skip entry naming it."""
        return [(sample, skipped) if sample is None else self._sample(sample)
                for sample, skipped in outcomes]

    def _sample(self, sample: dict) -> tuple[dict | None, list]:
        out, made_from = {}, {}
        for name, value in sample.items():
            if name == KEY or _kind(name) not in PIL_FORMATS:
                out[name] = value
                continue
            field = self.stored_field(name)
            if field in out:
                earlier = made_from.get(field, field)
                return _dropped(sample, name, f"this image and {_path(sample, earlier)}, of "
                                f"one sample, would both be stored as {field}: "
                                f"{self._advice(earlier, name)}")
            try:
                field, out[field] = self.image(value, name)
            except (OSError, ValueError, SyntaxError) as err:  # what PIL raises on bad data
                return _dropped(sample, name, f"cannot transform the image: {err}")
            made_from[field] = name
        return out, []

    def _advice(self, first: str, second: str) -> str:
        kept = Transform(self.resize, self.resize_mode).stored_field
        if self.encode != "keep" and kept(first) != kept(second):
            return "pack with --encode keep, or without --group-by-stem"
        return "pack without --group-by-stem, or without --resize and --encode"

    def image(self, data: bytes, field: str):
        """(stored field, value) of one image: encoded bytes, or a uint8 array for raw."""
        import numpy as np
        from PIL.Image import DecompressionBombError

        from packer.images import decode_image

        try:
            image = self._resized(decode_image(data, None, _kind(field)))
        except DecompressionBombError as err:  # not an OSError, as bad data is
            raise ValueError(err) from None
        if self.encode == "raw":
            return RAW_IMAGE_FIELD, np.ascontiguousarray(np.asarray(image, dtype=np.uint8))
        pil_format, stored_field = self._target(field)
        out = io.BytesIO()
        quality = self.encode.partition(":")[2]
        settings = {"JPEG": {"quality": int(quality or JPEG_QUALITY)},
                    "WEBP": {"quality": WEBP_QUALITY}}.get(pil_format, {})
        image.save(out, pil_format, **settings)
        return stored_field, out.getvalue()

    def _resized(self, image):
        """The upright 8-bit RGB `image` brought to the size rule."""
        from PIL import Image

        if self.resize is None:
            return image
        width, height = image.size
        match = _SIZE.match(self.resize.strip().lower())
        if match[3]:
            return _fit(image, int(match[3]), int(match[4]), self.resize_mode)
        side = int(match[2])
        if match[1]:  # max:N, never enlarged
            scale = min(1.0, side / max(width, height))
        else:
            scale = side / min(width, height)
        size = (max(1, round(width * scale)), max(1, round(height * scale)))
        return image if size == image.size else image.resize(_safe(size, self.resize),
                                                             Image.BILINEAR)


def _safe(size: tuple[int, int], rule: str) -> tuple[int, int]:
    """`size`, where an image of that size stays within Pillow's guard against
    decompression bombs (a 3000x2 image made 2000 on its shorter side would take 6 GB)."""
    from PIL import Image

    if Image.MAX_IMAGE_PIXELS and size[0] * size[1] > Image.MAX_IMAGE_PIXELS:
        raise ValueError(f"--resize {rule} would make it {size[0]}x{size[1]}, "
                         f"{size[0] * size[1]:,} pixels, more than Pillow's limit of "
                         f"{Image.MAX_IMAGE_PIXELS:,} (its MAX_IMAGE_PIXELS)")
    return size


def _dropped(sample: dict, name: str, reason: str) -> tuple[None, list]:
    """The skip entries of a sample left out for its image `name`: that image with the
    reason, and each other file of the sample."""
    path = _path(sample, name)
    others = [{"path": _path(sample, other), "reason": f"belongs to the sample of {path}, "
               "which was skipped"} for other in sample if other not in (KEY, name)
              and not (other == _LABEL and type(sample[other]) is int)]
    return None, [{"path": path, "reason": reason}, *others]


def _path(sample: dict, field: str) -> str:
    return restored_path(sample[KEY], field)


def _fit(image, width: int, height: int, mode: str):
    """`image` made exactly width x height: stretched, or scaled to cover and cropped at
    the centre, or scaled to fit and padded with black at the centre."""
    from PIL import Image

    if mode == "stretch" or image.size == (width, height):
        return image if image.size == (width, height) else image.resize((width, height),
                                                                          Image.BILINEAR)
    scales = (width / image.width, height / image.height)
    scale = max(scales) if mode == "crop" else min(scales)
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    scaled = image.resize(_safe(size, f"{width}x{height}"), Image.BILINEAR) \
        if size != image.size else image
    if mode == "crop":
        left, top = (size[0] - width) // 2, (size[1] - height) // 2
        return scaled.crop((left, top, left + width, top + height))
    canvas = Image.new("RGB", (width, height))
    canvas.paste(scaled, ((width - size[0]) // 2, (height - size[1]) // 2))
    return canvas


def _kind(field: str) -> str:
    return field.rsplit(".", 1)[-1].lower()


def stored_extension(field: str) -> str:
    """The extension a stored image field is written back with (`rgb.npy` -> `npy`)."""
    return "npy" if field == RAW_IMAGE_FIELD else field


def transform_of(manifest: dict) -> Transform | None:
    """The transform a dataset's images went through when packed, if any."""
    record = manifest.get("transform")
    if not record:
        return None
    return Transform(record["resize"], record.get("resize_mode") or "crop", record["encode"])


def reencoded_text(manifest: dict) -> str | None:
    """`images re-encoded when packed (--resize 64x64 --encode raw): ...`, or None."""
    record = manifest.get("transform")
    if not record:
        return None
    flags = [f"--resize {record['resize']}"] if record["resize"] else []
    if record.get("resize_mode") and record["resize_mode"] != "crop":
        flags.append(f"--resize-mode {record['resize_mode']}")
    flags.append(f"--encode {record['encode']}")
    stored = ("uint8 pixels in rgb.npy" if record["encode"] == "raw"
              else "the stored bytes are not the source files'")
    return f"images re-encoded when packed ({' '.join(flags)}): {stored}"
