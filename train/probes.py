"""Checks before and beside training: `train check`, `train overfit`, `train lr-find`."""

import json
import math
from pathlib import Path

import torch

import packer
from train.config import TrainConfig
from train.data import datasets, describe, non_finite, require_finite, to_inputs, to_targets
from train.loop import build
from train.metrics import strict_json

IMBALANCE = 5.0  # largest / smallest class count that earns a warning


def _batches(config: TrainConfig, count: int, shuffle: bool = True):
    info = describe(config)
    train_set, _ = datasets(info, config)
    train_set.shuffle = shuffle
    loader = packer.DataLoader(train_set, batch_size=config.batch_size,
                               num_workers=config.workers)
    batches = []
    for batch in loader:
        batches.append(batch)
        if len(batches) == count:
            break
    return info, batches, len(loader)


def check(config: TrainConfig) -> dict:
    """The data-pipeline checks; writes OUT/check_grid.png. Returns a report; its "error"
    says where the data hold NaN or infinite values (None: nowhere)."""
    info, batches, _ = _batches(config, 4)
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
        counts = dict(zip(info.classes, info.class_counts, strict=True))
        report["class_counts"] = counts
        low, high = min(counts.values()), max(counts.values())
        if low == 0 or high / low > IMBALANCE:
            report["warnings"].append(f"classes are imbalanced ({high:,} against {low:,} "
                                      "samples): consider --class-weights auto")
    loss = run.loss_fn(run.model(inputs).float().squeeze(1) if info.task == "regress"
                       else run.model(inputs).float(), targets)
    loss.backward()
    grads = [p.grad for p in run.model.parameters() if p.grad is not None]
    report["forward_backward"] = {"loss": loss.item(), "finite_gradients": all(
        torch.isfinite(g).all().item() for g in grads)}
    Path(config.out).mkdir(parents=True, exist_ok=True)
    report["grid"] = str(_grid(batches[0], info, Path(config.out) / "check_grid.png"))
    return report


def _grid(batch: dict, info, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    count = min(16, len(batch[info.label]))
    figure, axes = plt.subplots(4, 4, figsize=(8, 8))
    for index, axis in enumerate(axes.flat):
        axis.axis("off")
        if index >= count:
            continue
        label = batch[info.label][index]
        name = info.classes[int(label)] if info.classes else f"{float(label):.3g}"
        if info.kind == "image":
            image = batch[info.inputs[0]][index]
            axis.imshow(image.permute(1, 2, 0).numpy() if image.ndim == 3 else image.numpy(),
                        cmap="gray")
        else:
            axis.plot(torch.as_tensor(batch[info.inputs[0]][index]).float().reshape(
                len(batch[info.inputs[0]][index]), -1).numpy())
        axis.set_title(name, fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)
    return path


def overfit(config: TrainConfig, samples: int = 128, max_steps: int = 300) -> dict:
    """Train on `samples` samples until the loss is near zero; says whether it got there."""
    config.batch_size = min(config.batch_size, samples)
    info, batches, _ = _batches(config, math.ceil(samples / config.batch_size), shuffle=False)
    require_finite(info, config)
    config.augment, config.dropout, config.weight_decay = False, 0.0, 0.0
    run = build(config, 1, info)
    data = [(to_inputs(b, info, run.device), to_targets(b, info, run.device)) for b in batches]
    run.model.train()
    losses = []
    for step in range(max_steps):
        inputs, targets = data[step % len(data)]
        outputs = run.model(inputs).float()
        loss = run.loss_fn(outputs.squeeze(1) if info.task == "regress" else outputs, targets)
        run.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        run.optimizer.step()
        losses.append(loss.item())
        if step >= len(data) and max(losses[-len(data):]) < 0.01:
            break
    first, last = losses[0], max(losses[-len(data):])
    reached = last < 0.05 or last < 0.02 * first
    return {"samples": sum(len(t) for _, t in data), "steps": len(losses),
            "first_loss": first, "final_loss": last, "reached": reached,
            "message": (f"overfit: loss {first:.4f} -> {last:.4f} in {len(losses)} steps" if reached
                        else f"did NOT overfit: loss {first:.4f} -> {last:.4f} after "
                        f"{len(losses)} steps; check that labels match samples (train check), "
                        "try another --lr, or a bigger --model")}


def lr_find(config: TrainConfig, steps: int = 100, low: float = 1e-6,
            high: float = 1.0) -> dict:
    """The learning-rate range test: lr grows exponentially while the loss is recorded;
    writes OUT/lr_find.png and OUT/lr_find.json and suggests a learning rate."""
    info, batches, _ = _batches(config, steps)
    require_finite(info, config)
    config.schedule, config.warmup_epochs = "constant", 0
    run = build(config, 1, info)
    run.model.train()
    rates, losses, smooth = [], [], None
    for step in range(steps):
        lr = low * (high / low) ** (step / max(steps - 1, 1))
        for group in run.optimizer.param_groups:
            group["lr"] = lr
        batch = batches[step % len(batches)]
        inputs, targets = to_inputs(batch, info, run.device), to_targets(batch, info, run.device)
        outputs = run.model(inputs).float()
        loss = run.loss_fn(outputs.squeeze(1) if info.task == "regress" else outputs, targets)
        run.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        run.optimizer.step()
        smooth = loss.item() if smooth is None else 0.9 * smooth + 0.1 * loss.item()
        rates.append(lr)
        losses.append(smooth)
        if not math.isfinite(smooth) or smooth > 4 * min(losses):
            break
    best = min(range(len(losses)), key=losses.__getitem__)
    result = {"lrs": rates, "losses": losses, "suggested_lr": rates[best] / 10,
              "min_loss_lr": rates[best]}
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "lr_find.json").write_text(json.dumps(strict_json(result), allow_nan=False))
    _plot_lr(rates, losses, result["suggested_lr"], out / "lr_find.png")
    return result


def _plot_lr(rates: list, losses: list, suggested: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6, 4))
    axis.plot(rates, losses)
    axis.axvline(suggested, color="C1", linestyle="--", label=f"suggested {suggested:.2g}")
    axis.set(xscale="log", xlabel="learning rate", ylabel="loss (smoothed)",
             title="learning-rate range test")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
