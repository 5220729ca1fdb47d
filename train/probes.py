"""Checks before and beside training: `train check`, `train overfit`, `train lr-find`."""

import json
import math
from dataclasses import replace
from pathlib import Path

import torch
from tqdm import tqdm

import packer
from packer.errors import PackerError
from train import finetune, lr_range, plots, recipe
from train.augment import augment_images
from train.config import AUGMENTS, TrainConfig
from train.data import describe, image_shape
from train.datasets import datasets
from train.finite import non_finite, require_finite
from train.inputs import IMAGE_MEAN, IMAGE_STD, to_inputs, to_targets
from train.metrics import strict_json
from train.run import build
from train.step import (
    NonFiniteLoss,
    forward_loss,
    normalisation,
    set_seed,
    train_step,
    training_batch,
)


def _prepared(config: TrainConfig, shuffle: bool = True, largest: int | None = None):
    """The config with its auto fields chosen (the lr 1e-3 unless given), the data's
    description and a loader over the training data; images chosen larger than
    `largest` a side, where given, are read at `largest` (unless --image-size says)."""
    config = replace(config, lr=config.lr or 1e-3)
    info = describe(config)
    recipe.refuse_inapplicable(config, info)
    finetune.prepare_images(config, info)
    finetune.choose_optimizer(config)
    if recipe.choose_image_size(config, info) and largest:
        side = config.image_size
        if max((side,) if isinstance(side, int) else side) > largest:
            config.image_size, info.input_shape = largest, image_shape(largest)
    train_set, _ = datasets(info, config)
    recipe.choose(config, info, getattr(train_set, "total", len(train_set)), 1)
    train_set.shuffle = shuffle
    loader = packer.DataLoader(train_set, batch_size=config.batch_size,
                               num_workers=config.workers)
    return config, info, loader


def _first(loader, count: int) -> list:
    batches = []
    for batch in loader:
        batches.append(batch)
        if len(batches) == count:
            break
    return batches


def check(config: TrainConfig) -> dict:
    """The data-pipeline checks; writes OUT/check_grid.png (samples as stored) and
    OUT/check_augmented.png (the same samples as the model sees them). Returns a
    report; its "error" says where the data hold NaN or infinite values (None: nowhere)."""
    config, info, loader = _prepared(config)
    batches = _first(loader, 4)
    run = build(config, 1, info)
    inputs = torch.cat([to_inputs(b, info, run.device) for b in batches])
    targets = torch.cat([to_targets(b, info, run.device) for b in batches])
    finite = inputs[torch.isfinite(inputs)]
    shown = finite if finite.numel() else inputs
    layouts = {"image": "channels first (C, H, W), " + ("RGB" if info.decoded_images else "grey"),
               "vector": "(features,)", "sequence": "(channels, time)"}
    report = {"inputs": ", ".join(info.inputs), "input_shape": list(inputs.shape[1:]),
              "input_dtype": str(inputs.dtype), "layout": layouts[info.kind],
              "range_after_normalisation": [shown.min().item(), shown.max().item()],
              "mean_std_after_normalisation": [shown.mean().item(), shown.std().item()],
              "non_finite_inputs": int((~torch.isfinite(inputs)).sum().item()),
              "label_dtype": str(targets.dtype), "warnings": [],
              "error": non_finite(info, config)}
    if info.classes and info.class_counts:
        report["class_counts"] = dict(zip(info.classes, info.class_counts, strict=True))
    imbalanced = recipe.imbalance_warning(info, config)
    report["warnings"] += [imbalanced] if imbalanced else []
    _, loss = forward_loss(run, inputs, targets)
    loss.backward()
    grads = [p.grad for p in run.model.parameters() if p.grad is not None]
    report["forward_backward"] = {"loss": loss.item(), "finite_gradients": all(
        torch.isfinite(g).all().item() for g in grads)}
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    report["grid"] = str(_raw_grid(batches[0], info, out / "check_grid.png"))
    report["augmented_grid"] = str(_augmented_grid(run, batches[0], out / "check_augmented.png"))
    if info.kind == "image":
        report["policies_grid"] = str(_policies_grid(run, batches[0],
                                                     out / "check_policies.png"))
    return report


def _titles(labels, info) -> list[str]:
    labels = torch.as_tensor(labels)
    if info.classes and info.task == "classify":
        return [info.classes[int(label)] for label in labels[:16]]
    return [", ".join(f"{float(v):.3g}" for v in label.reshape(-1)[:3]) for label in labels[:16]]


def _raw_grid(batch: dict, info, path: Path) -> Path:
    images = list(batch[info.inputs[0]][:16])
    return plots.grid(images, _titles(batch[info.label], info), path, "as stored")


def _augmented_grid(run, batch: dict, path: Path) -> Path:
    """The inputs after normalisation and the training augmentation (MixUp/CutMix too),
    mapped back to [0, 1] for display: images by the normalisation's inverse, array
    images min to max."""
    info, config = run.info, run.config
    inputs = to_inputs(batch, info, run.device)[:16]
    targets = to_targets(batch, info, run.device)[:16]
    inputs, mixed = training_batch(run, inputs, targets, set_seed(config.seed, 0))
    shown = _shown(inputs, info)
    titles = (_titles(targets, info) if mixed.ndim == targets.ndim
              else [f"{info.classes[int(row.argmax())]} ({row.max():.2f})" for row in mixed])
    extra = f", mixup {config.mixup}, cutmix {config.cutmix}" if mixed is not targets else ""
    return plots.grid(list(shown.detach().cpu()), titles, path,
                      f"as the model sees them: --augment {config.augment}{extra}")


def _shown(inputs: torch.Tensor, info) -> torch.Tensor:
    """Model inputs mapped back to [0, 1] for display: images by the normalisation's
    inverse, array images min to max."""
    if info.model_input is not None:  # a library model's own normalisation
        shape = (1, -1, 1, 1)
        return (inputs * torch.tensor(info.model_input["std"]).view(shape)
                + torch.tensor(info.model_input["mean"]).view(shape))
    if info.decoded_images:
        return inputs * IMAGE_STD + IMAGE_MEAN
    if info.kind == "image":
        low = inputs.amin(dim=(1, 2, 3), keepdim=True)
        return (inputs - low) / (inputs.amax(dim=(1, 2, 3), keepdim=True) - low).clamp_min(1e-8)
    return inputs


POLICY_SAMPLES = 6


def _policies_grid(run, batch: dict, path: Path) -> Path:
    """The same images under every --augment policy, a row each (drawn from --seed, as
    the first epoch draws them), so that the policies can be compared by eye."""
    info, config = run.info, run.config
    inputs = to_inputs(batch, info, run.device)[:POLICY_SAMPLES].cpu()
    rows = {policy: list(_shown(augment_images(inputs, set_seed(config.seed, 0), policy,
                                               normalisation(info)), info))
            for policy in AUGMENTS}
    return plots.rows_grid(rows, _titles(batch[info.label], info)[:POLICY_SAMPLES], path,
                           "each --augment policy on the same images")


OVERFIT_SIDE = 32  # images a side: memorising a few samples needs no detail
OVERFIT_BATCH = 32  # a step of the check stays short on a CPU


def overfit(config: TrainConfig, samples: int = 128, max_steps: int = 200) -> dict:
    """Train on `samples` samples until the loss is near zero; says whether it got there.
    Bounded for a CPU: images at most OVERFIT_SIDE a side, batches of OVERFIT_BATCH, and
    `max_steps` steps, unless --image-size and --batch-size say otherwise."""
    config = replace(config, augment="none", dropout=0.0, weight_decay=0.0, mixup=0.0,
                     cutmix=0.0, schedule="constant", warmup_epochs=0)
    config.batch_size = min(config.batch_size or OVERFIT_BATCH, samples)
    config, info, loader = _prepared(config, shuffle=False, largest=OVERFIT_SIDE)
    require_finite(info, config)
    run = build(config, 1, info)
    data = [(to_inputs(b, info, run.device), to_targets(b, info, run.device))
            for b in _first(loader, math.ceil(samples / config.batch_size))]
    run.model.train()
    losses = []
    bar = tqdm(range(max_steps), desc="overfit", unit="step", leave=False)
    for step in bar:
        try:
            losses.append(train_step(run, *data[step % len(data)]).item())
        except NonFiniteLoss:
            raise PackerError(f"overfit: the loss became NaN or infinite at step {step + 1}: "
                              "try a lower --lr") from None
        bar.set_postfix(loss=f"{losses[-1]:.4f}", refresh=False)
        if step >= len(data) and max(losses[-len(data):]) < 0.01:
            break
    bar.close()
    first, last = losses[0], max(losses[-len(data):])
    reached = last < 0.05 or last < 0.02 * first
    return {"samples": sum(len(t) for _, t in data), "steps": len(losses),
            "image_size": config.image_size, "batch_size": config.batch_size,
            "first_loss": first, "final_loss": last, "reached": reached,
            "message": (f"overfit: loss {first:.4f} -> {last:.4f} in {len(losses)} steps" if reached
                        else f"did NOT overfit: loss {first:.4f} -> {last:.4f} after "
                        f"{len(losses)} steps; check that labels match samples (train check), "
                        "try another --lr, or a bigger --model")}


def lr_find(config: TrainConfig, steps: int = 100) -> dict:
    """The learning-rate range test; writes OUT/lr_find.png and OUT/lr_find.json and
    suggests a learning rate."""
    config = replace(config, schedule="constant", warmup_epochs=0)
    config, info, loader = _prepared(config)
    require_finite(info, config)
    run = build(config, 1, info)

    def batches():
        return ((to_inputs(b, info, run.device), to_targets(b, info, run.device))
                for b in loader)

    result = lr_range.sweep(run, batches, steps)
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "lr_find.json").write_text(json.dumps(strict_json(result), allow_nan=False))
    plots.lr_test(result["lrs"], result["losses"], result["suggested_lr"], out / "lr_find.png")
    return result
