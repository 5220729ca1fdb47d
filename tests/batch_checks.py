"""Batches checked against torch's own: the same samples read one by one through
torch's DataLoader and collated after (per_sample), compared field by field."""

import torch

from packer.read.collate import collate_samples


def per_sample(ds, workers: int, batch_size: int) -> list[dict]:
    loader = torch.utils.data.DataLoader(ds, batch_size=batch_size, num_workers=workers,
                                         collate_fn=collate_samples)
    return list(loader)


def same_batch(ours: dict, theirs: dict) -> bool:
    if ours.keys() != theirs.keys():
        return False
    for name, value in ours.items():
        other = theirs[name]
        if isinstance(value, torch.Tensor):
            if not (isinstance(other, torch.Tensor) and value.dtype == other.dtype
                    and torch.equal(value, other)):
                return False
        elif list(value) != list(other):
            return False
    return True
