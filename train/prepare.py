"""What a run reads and the values it chose: the config with every auto field chosen
from the data (a resumed run: the first run's), the datasets, their loaders and the
RAM cache."""

import errno
import math
import os
from dataclasses import dataclass, replace
from pathlib import Path

import torch

import packer
from packer.errors import PackerError
from train import checkpoint, finetune, lr_range, monitor, recipe
from train.cache import RamCache
from train.config import TrainConfig
from train.data import DataInfo, describe
from train.datasets import datasets
from train.finite import require_finite
from train.inputs import to_inputs, to_targets
from train.run import build, rank0_value, setup_distributed, use_cuda
from train.step import seed_number, set_seed

# a resumed run takes these from its checkpoint
CHOSEN = ("image_size", "epochs", "batch_size", "lr", "width", "dropout", "weight_decay",
          "patience", "norm", "cache", "freeze_epochs", "monitor", "val_split", "time_limit",
          "optimizer", "backbone_lr_scale")


@dataclass
class Data:
    """What a run reads: the datasets, their loaders, the cache, and what was chosen."""
    info: DataInfo
    train_set: object
    loader: object
    val_loader: object
    cache: RamCache | None
    val_cache: RamCache | None
    order: torch.Generator  # a loose folder's shuffle; packed data shuffle themselves
    choices: list
    steps: int  # batches an epoch (optimizer steps: a step a group of --accumulate)
    seed: int
    keys: object = None  # with a cache of packed data: a loader of the epoch's keys

    def epoch(self, number: int, generator: torch.Generator):
        """The batches of epoch `number`; from the cache once it is full, in the order
        the loader reads them (a loose folder's: in an order drawn from `generator`)."""
        if self.cache is not None and self.cache.full and self.keys is None:
            return self.cache.batches(generator)
        self.order.manual_seed(seed_number(self.seed, number))
        for data in (self.train_set, self.keys and self.keys.dataset):
            if hasattr(data, "set_epoch"):
                data.set_epoch(number)
        if self.cache is not None and self.cache.full:
            return self.cache.batches_in(self.keys)
        return self.cache.fill(self.loader) if self.cache is not None else self.loader

    def val(self):
        """The validation batches (None: no validation)."""
        if self.val_cache is None:
            return self.val_loader
        return self.val_cache.batches() if self.val_cache.full else self.val_cache.fill(
            self.val_loader)


def prepare(config: TrainConfig, worker_init=None) -> tuple[TrainConfig, Data]:
    """The run's config with every auto field chosen, and its data (`worker_init`: the
    loaders' worker_init_fn)."""
    config = replace(config)
    _writable_out(Path(config.out))
    finetune.refuse_misuse(config)
    if config.resume:
        _take_saved_choices(config)
    info = describe(config)
    recipe.refuse_inapplicable(config, info)
    require_finite(info, config)
    _, world, _ = setup_distributed(config.device)  # first: the split follows the rank
    choices = _held_out(config, info) + finetune.prepare_images(config, info)
    choices += recipe.choose_image_size(config, info)
    train_set, val_set = datasets(info, config)
    total = getattr(train_set, "total", len(train_set))
    choices += recipe.choose(config, info, total, world)
    epochs = next((choice for choice in choices if choice.name == "epochs"), None)
    choices += finetune.choose(config, info, total, epochs)
    choices += monitor.choose(config, info, getattr(val_set, "total", len(val_set or ())))
    if info.sides and info.sides.train_split and not config.val_split_name:
        config.val_split_name = info.sides.val_split  # a resume reads the same split
        choices.append(recipe.Choice("val_split_name", info.sides.val_split or "none",
                                     info.sides.text(config.data)))
    config.cache = "ram" if rank0_value(config.cache == "ram") else "off"
    order = torch.Generator()
    workers = config.workers
    cut = streams(total // world, config.batch_size * config.accumulate)
    _cut(train_set, val_set, cut=cut)
    loader = packer.DataLoader(train_set, batch_size=config.batch_size,
                               num_workers=workers, pin_memory=use_cuda(config.device),
                               shuffle=info.files is not None, generator=order,
                               worker_init_fn=worker_init)
    val_loader = val_set and packer.DataLoader(val_set, batch_size=config.batch_size,
                                               num_workers=workers,
                                               worker_init_fn=worker_init)
    cache = RamCache(config.batch_size) if config.cache == "ram" else None
    val_cache = RamCache(config.batch_size) if cache and val_loader else None
    keys = packer.DataLoader(_cut(datasets(info, config, keys_only=True)[0], cut=cut),
                             num_workers=workers, batch_size=config.batch_size,
                             generator=torch.Generator()) if (  # (no draw of torch's seed)
        cache is not None and info.files is None and world == 1) else None
    steps = math.ceil(len(train_set) / config.batch_size) if cache and not keys else len(loader)
    data = Data(info, train_set, loader, val_loader, cache, val_cache, order, choices,
                max(steps, 1), config.seed, keys)
    if config.lr is None:
        config.lr, why = _range_test(config, data)
        config.scale_lr = False
        data.choices.append(recipe.Choice("lr", float(f"{config.lr:.3g}"), why))
    data.choices += finetune.choose_backbone_share(config)
    return config, data


MAX_STREAMS = 24  # divides evenly among 1, 2, 3, 4, 6, 8, 12 or 24 workers
STREAM_STEPS = 8  # optimizer steps a stream holds at least (each ends with a short batch)


def streams(samples: int, step: int) -> int:
    """The streams a rank's `samples` are read in (packer.read.streams): the batches and
    their order are then the same for any --workers, so the same --seed gives the same
    weights. Chosen from the data and the samples of an optimizer step (the batch size
    times --accumulate), never the workers."""
    return max(1, min(MAX_STREAMS, samples // (STREAM_STEPS * step)))


def _cut(*sets, cut: int):
    """Packed datasets read in `cut` streams (a loose folder's order is torch's sampler's,
    the same for any workers already); returns the first."""
    for data in sets:
        if isinstance(data, packer.PackedDataset):
            data.streams = cut
    return sets[0]


def _held_out(config: TrainConfig, info: DataInfo) -> list:
    """--val-split auto: the share of DATA that the sides hold out (train.sides)."""
    if config.val_split is not None or info.sides is None:
        return []
    config.val_split = info.sides.fraction
    return [recipe.Choice("val_split", config.val_split, info.sides.why)] if info.sides.why \
        else []


def _writable_out(out: Path) -> None:
    """--out checked first (without making it, so a refused run leaves nothing): before
    the data is read and the learning rate chosen, not at the first checkpoint."""
    existing = next(p for p in (out, *out.absolute().parents) if p.exists())
    if not os.access(existing, os.W_OK):
        code = errno.EROFS if os.statvfs(existing).f_flag & os.ST_RDONLY else errno.EACCES
        raise PermissionError(code, os.strerror(code), str(out))


RESUME_INSTEAD = ("run without --resume to start over (with another --out to keep this run's "
                  "files), or put back a copy of last.pt")


def _take_saved_choices(config: TrainConfig) -> None:
    """--resume: the values chosen for the first run's auto fields (no second range test)."""
    path = Path(config.out) / "last.pt"
    if not path.exists():
        raise PackerError(f"--resume: no checkpoint in {config.out} (last.pt)")
    saved = checkpoint.load(path, torch.device("cpu"), checkpoint.RESUME_KEYS,
                            RESUME_INSTEAD)["config"]
    for name in CHOSEN:
        if getattr(config, name) in (None, "auto"):
            setattr(config, name, saved.get(name, getattr(config, name)))


def _range_test(config: TrainConfig, data: Data) -> tuple[float, str]:
    """--lr auto: (the rate, why) from a short range test on the training data, on a
    model of its own, in the first epoch's phase: when fine-tuning, on the head alone
    while the backbone is frozen (the backbone's rate is its share of the head's)."""
    probe = build(replace(config, lr=lr_range.LOW, scale_lr=False), data.steps, data.info)
    finetune.enter_epoch(probe, 0)

    def batches():
        set_seed(config.seed, 0)
        data.order.manual_seed(seed_number(config.seed, 0))
        return ((to_inputs(b, data.info, probe.device, config.channels_last),
                 to_targets(b, data.info, probe.device)) for b in data.loader)

    result = lr_range.sweep(probe, batches, lr_range.AUTO_STEPS, lr_range.AUTO_LOW,
                            lr_range.AUTO_HIGH)
    phase = " on the head alone, the backbone frozen" if probe.frozen else ""
    return rank0_value(result["suggested_lr"]), lr_range.why(result) + phase
