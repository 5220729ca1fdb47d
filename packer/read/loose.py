"""A loose folder of images read as people write it by hand: one file opened, read and
decoded per sample. The baseline `packer bench` measures packed reads against, and
what `train` reads a folder that was never packed with."""

from pathlib import Path

import torch

from packer.read.decode import IMAGE_FIELDS
from packer.read.pixels import rgb8_tensor
from packer.sample import KEY
from packer.sources.files.checks import check_file
from packer.sources.files.read import read_file
from packer.sources.files.scan import scan_folder


def loose_images(folder: Path) -> list[tuple[str, int]]:
    """(path, class id) of each image of a folder, as packing would take them: the
    first file of each sample, leaving out what the cheap check would skip."""
    kept = []
    for sample in scan_folder(folder).samples():
        field, name = sample.files[0]
        path = str(folder / name)
        if field.lower() in IMAGE_FIELDS and check_file(field, read_file(path), "header") is None:
            kept.append((path, sample.label or 0))
    return kept


class LooseImages(torch.utils.data.Dataset):
    """The baseline: one file opened, read and (unless `decode` is off) decoded per
    sample, as people write it by hand; samples look like the loader's."""

    def __init__(self, files: list[tuple[str, int]], image_size, decode: bool = True):
        """`image_size`: a square's side, or (height, width)."""
        self.files, self.decode = files, decode
        self.size = (image_size, image_size) if isinstance(image_size, int) else \
            tuple(image_size)

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> dict:
        path, label = self.files[index]
        with open(path, "rb") as file:
            data = file.read()
        if self.decode:
            data = rgb8_tensor(data, self.size, Path(path).suffix[1:].lower())
        return {KEY: path, "jpg": data, "cls": label}
