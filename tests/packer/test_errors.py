"""Errors a user can fix keep their message across a DataLoader worker."""

import pytest
import torch

from packer.errors import DatasetError, PackerError


class Refuses(torch.utils.data.Dataset):
    def __init__(self, kind):
        self.kind = kind

    def __len__(self):
        return 2

    def __getitem__(self, index):
        raise self.kind(f"photo{index}.jpg: not an image\nthat can be decoded")


@pytest.mark.parametrize("kind", [PackerError, DatasetError])
def test_an_error_raised_in_a_worker_keeps_its_own_message(kind):
    loader = torch.utils.data.DataLoader(Refuses(kind), num_workers=1)
    with pytest.raises(kind) as raised:
        next(iter(loader))
    assert str(raised.value) == "photo0.jpg: not an image\nthat can be decoded"
