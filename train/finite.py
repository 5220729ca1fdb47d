"""NaN and infinite values in the data: found before training, named in one message."""

import torch

import packer
from packer.errors import PackerError
from train.config import TrainConfig
from train.data import STATS_SAMPLES, AsTraining, DataInfo, part_cache

NAMED_SAMPLES = 5  # samples with NaN or infinite values that the message names


def non_finite(info: DataInfo, config: TrainConfig) -> str | None:
    """Where DATA (and --val) hold NaN or infinite values in the float fields training
    reads, inputs and label: one message, or None when every value is finite."""
    if info.files is not None or info.decoded_images:
        return None
    found = [_non_finite_in(path, info, config, None) for path in config.mix or [config.data]]
    if config.val is not None:
        found.append(_non_finite_in(config.val, info, config, info.val_transform))
    return " ".join(m for m in found if m) or None


def require_finite(info: DataInfo, config: TrainConfig) -> None:
    message = non_finite(info, config)
    if message:
        raise PackerError(message)


def _non_finite_in(path: str, info: DataInfo, config: TrainConfig,
                   transform: AsTraining | None) -> str | None:
    """One pass over every sample of `path` (the float fields only)."""
    data = packer.open_dataset(path, decode="raw", rank=0, world_size=1,
                               transform=info.keep(transform), **part_cache(config))
    counts, keys, samples, total = {}, [], 0, 0
    for batch in packer.DataLoader(data, batch_size=STATS_SAMPLES, num_workers=config.workers):
        bad = torch.zeros(len(batch["__key__"]), dtype=torch.bool)
        for name in (*info.inputs, info.label):
            values = batch[name]
            if isinstance(values, torch.Tensor) and values.is_floating_point():
                wrong = ~torch.isfinite(values.reshape(len(values), -1))
                counts[name] = counts.get(name, 0) + int(wrong.sum())
                bad |= wrong.any(dim=1)
        rows = bad.nonzero().flatten().tolist()
        samples, total = samples + len(rows), total + len(bad)
        keys += [batch["__key__"][i] for i in rows[:NAMED_SAMPLES - len(keys)]]
    if not samples:
        return None
    fields = ", ".join(f"{n:,} value{'s' * (n > 1)} in {name}" for name, n in counts.items() if n)
    more = ", ..." if samples > len(keys) else ""
    fix = "fix or drop those records before packing" + (
        "" if counts.get(info.label) else ", or leave the field out with --inputs")
    return (f"{path}: NaN or infinite values in {samples:,} of {total:,} samples ({fields}; "
            f"sample keys {', '.join(keys)}{more}). Training on them makes the loss "
            f"NaN: {fix}.")
