"""`train fit`: setup, then per epoch a training pass, validation, a checkpoint."""

import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from tqdm import tqdm

import packer
from packer.errors import PackerError
from train import checkpoint, models
from train.augment import augment_images
from train.config import TrainConfig
from train.data import DataInfo, datasets, describe, require_finite, to_inputs, to_targets
from train.metrics import Metrics, strict_json
from train.schedule import lr_factor


@dataclass
class Run:
    config: TrainConfig
    info: DataInfo
    device: torch.device
    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: object
    scaler: torch.amp.GradScaler | None
    amp_dtype: torch.dtype | None
    loss_fn: nn.Module
    rank: int = 0
    world: int = 1
    out: Path = Path("runs/exp")
    history: list = field(default_factory=list)

    @property
    def main(self) -> bool:
        return self.rank == 0


def use_cuda(device: str) -> bool:
    """--device: cuda when asked (an error without a GPU), or for auto when there is one."""
    if device == "cuda" and not torch.cuda.is_available():
        built = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU only"
        raise PackerError(f"--device cuda: PyTorch sees no CUDA GPU (torch {torch.__version__}, "
                          f"built for {built}); use --device cpu or auto")
    return device != "cpu" and torch.cuda.is_available()


def setup_distributed(device: str = "auto") -> tuple[int, int, int]:
    """rank, world size and local rank; torchrun's environment starts a process group."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    cuda = use_cuda(device)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo")
    if world > 1:
        return dist.get_rank(), world, int(os.environ.get("LOCAL_RANK", "0"))
    return 0, 1, 0


def pick_device(local_rank: int, device: str = "auto") -> torch.device:
    if use_cuda(device):
        torch.cuda.set_device(local_rank)
        # TF32 matmuls and convolutions: near-fp32 accuracy at several times the speed.
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def amp_dtype(mode: str, device: torch.device) -> torch.dtype | None:
    if mode == "auto":
        supported = device.type == "cuda" and torch.cuda.is_bf16_supported()
        return torch.bfloat16 if supported else None
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "off": None}[mode]


def loss_function(info: DataInfo, config: TrainConfig) -> nn.Module:
    if info.task == "regress":
        return nn.L1Loss() if config.loss == "l1" else nn.MSELoss()
    if info.task == "multilabel":
        return nn.BCEWithLogitsLoss()
    weights = None
    if config.class_weights == "auto" and info.class_counts:
        counts = torch.tensor(info.class_counts, dtype=torch.float).clamp_min(1)
        weights = counts.sum() / (len(counts) * counts)
    return nn.CrossEntropyLoss(weight=weights, label_smoothing=config.label_smoothing)


def make_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    # No weight decay on biases and norm scales: decaying them only hurts.
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.ndim > 1], "weight_decay": config.weight_decay},
              {"params": [p for p in params if p.ndim <= 1], "weight_decay": 0.0}]
    lr = config.effective_lr()
    if config.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=config.momentum, nesterov=True)
    if config.optimizer == "adam":
        return torch.optim.Adam(groups, lr=lr)
    return torch.optim.AdamW(groups, lr=lr)


def build(config: TrainConfig, steps_per_epoch: int, info: DataInfo) -> Run:
    rank, world, local_rank = setup_distributed(config.device)
    device = pick_device(local_rank, config.device)
    torch.manual_seed(config.seed)  # the same initial weights on every rank and every run
    model = models.build(config.model, info.kind, info.input_shape, info.num_outputs,
                         config.dropout)
    if config.weights:
        models.load_weights(model, config.weights, config.freeze_backbone)
    elif config.freeze_backbone:
        raise PackerError("--freeze-backbone needs --weights: a checkpoint whose backbone "
                          "is worth keeping")
    model = model.to(device, memory_format=torch.channels_last if config.channels_last
                     else torch.preserve_format)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(
            model, device_ids=[local_rank] if device.type == "cuda" else None)
    optimizer = make_optimizer(model, config)
    if config.schedule == "plateau":
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.3, patience=2)
    else:
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: lr_factor(step, steps_per_epoch, config))
    dtype = amp_dtype(config.amp, device)
    scaler = torch.amp.GradScaler(device.type) if dtype == torch.float16 else None
    return Run(config, info, device, model, optimizer, scheduler, scaler, dtype,
               loss_function(info, config).to(device), rank, world, Path(config.out))


def train_epoch(run: Run, loader, epoch: int) -> dict:
    """One pass; returns the mean loss, samples/s and the share of time spent waiting."""
    config, model = run.config, run.model
    model.train()
    generator = torch.Generator().manual_seed(config.seed * 100_003 + epoch)
    total_loss, samples, waited = 0.0, 0, 0.0
    began = mark = time.perf_counter()
    bar = tqdm(loader, desc=f"epoch {epoch + 1}/{config.epochs}",
               disable=not run.main or not sys.stderr.isatty(),  # no bars in log files
               leave=False, dynamic_ncols=True)
    for step, batch in enumerate(bar):
        waited += time.perf_counter() - mark
        inputs = to_inputs(batch, run.info, run.device, config.channels_last)
        targets = to_targets(batch, run.info, run.device)
        if config.augment and run.info.kind == "image":
            inputs = augment_images(inputs, generator)
        with torch.autocast(run.device.type, dtype=run.amp_dtype or torch.float32,
                            enabled=run.amp_dtype is not None):
            outputs = model(inputs)
            loss = run.loss_fn(outputs.float().squeeze(1) if run.info.task == "regress"
                               else outputs.float(), targets)
        if not _finite(run, loss):
            raise PackerError(_diverged(run, f"epoch {epoch + 1}, step {step + 1}: the "
                                             "training loss"))
        run.optimizer.zero_grad(set_to_none=True)
        if run.scaler:
            run.scaler.scale(loss).backward()
            run.scaler.unscale_(run.optimizer)
        else:
            loss.backward()
        if config.clip_grad:
            nn.utils.clip_grad_norm_(model.parameters(), config.clip_grad)
        if run.scaler:
            run.scaler.step(run.optimizer)
            run.scaler.update()
        else:
            run.optimizer.step()
        if not isinstance(run.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            run.scheduler.step()
        total_loss += loss.item() * targets.shape[0]
        samples += targets.shape[0]
        bar.set_postfix_str(f"loss {loss.item():.4f}", refresh=False)
        mark = time.perf_counter()
    seconds = time.perf_counter() - began
    sums = torch.tensor([total_loss, samples, waited, seconds], dtype=torch.float64)
    if run.world > 1:
        dist.all_reduce(sums)
    return {"loss": sums[0].item() / max(sums[1].item(), 1),
            "samples_per_s": sums[1].item() / max(sums[3].item() / run.world, 1e-9),
            "data_wait_share": sums[2].item() / max(sums[3].item(), 1e-9)}


def _finite(run: Run, loss: torch.Tensor) -> bool:
    """Whether the loss is finite on every rank (so that all ranks stop together)."""
    finite = torch.isfinite(loss.detach()).float()
    if run.world > 1:
        dist.all_reduce(finite, op=dist.ReduceOp.MIN)
    return bool(finite.item())


def _broken(run: Run, val: dict | None) -> str | None:
    """After an epoch: what became NaN or infinite, the weights or the validation loss."""
    model = run.model.module if run.world > 1 else run.model
    if not torch.stack([torch.isfinite(p).all() for p in model.parameters()]).all().item():
        return "the weights"
    if val and not math.isfinite(val["loss"]):
        return "the validation loss"
    return None


def _diverged(run: Run, what: str) -> str:
    """`what` became NaN or infinite: why, and what to try."""
    kept = (f"the checkpoints in {run.out} are from earlier epochs" if run.history
            else "no checkpoint was written")
    return (f"{what} became NaN or infinite, so training stopped ({kept}). The weights "
            f"diverged: try a lower --lr (this run: {run.config.effective_lr():g}) or "
            f"--clip-grad, or check the data with `train check {run.config.data}`.")


@torch.no_grad()
def evaluate(run: Run, loader) -> dict:
    run.model.eval()
    metrics = Metrics(run.info.task, run.info.classes, run.device)
    for batch in loader:
        inputs = to_inputs(batch, run.info, run.device, run.config.channels_last)
        targets = to_targets(batch, run.info, run.device)
        with torch.autocast(run.device.type, dtype=run.amp_dtype or torch.float32,
                            enabled=run.amp_dtype is not None):
            outputs = run.model(inputs).float()
        loss = run.loss_fn(outputs.squeeze(1) if run.info.task == "regress" else outputs, targets)
        metrics.update(loss, outputs, targets)
    return metrics.result()


def _monitor(run: Run, val: dict | None, train: dict) -> float:
    """Higher is better: validation accuracy, or minus a loss."""
    source = val or train
    if run.info.task != "regress" and "accuracy" in source:
        return source["accuracy"]
    return -source["loss"]


def _state(run: Run, epoch: int, best: float | None, best_epoch: int, stale: int) -> dict:
    model = run.model.module if run.world > 1 else run.model
    return {"model": model.state_dict(), "optimizer": run.optimizer.state_dict(),
            "scheduler": run.scheduler.state_dict(),
            "scaler": run.scaler.state_dict() if run.scaler else None, "epoch": epoch,
            "best": best, "best_epoch": best_epoch, "stale": stale,
            "config": run.config.to_dict(), "history": run.history}


def _restore(run: Run) -> tuple[int, float | None, int, int]:
    state = checkpoint.load(run.out / "last.pt", run.device)
    model = run.model.module if run.world > 1 else run.model
    model.load_state_dict(state["model"])
    run.optimizer.load_state_dict(state["optimizer"])
    run.scheduler.load_state_dict(state["scheduler"])
    if run.scaler and state["scaler"]:
        run.scaler.load_state_dict(state["scaler"])
    run.history = state["history"]
    return state["epoch"] + 1, state["best"], state["best_epoch"], state["stale"]


def _log(run: Run, writer, record: dict) -> None:
    with open(run.out / "metrics.jsonl", "a", encoding="utf-8") as file:
        file.write(json.dumps(strict_json(record), allow_nan=False) + "\n")
    if writer is None:
        return
    for side in ("train", "val"):
        for name, value in (record.get(side) or {}).items():
            if isinstance(value, int | float):
                writer.add_scalar(f"{side}/{name}", value, record["epoch"])
    writer.add_scalar("lr", record["lr"], record["epoch"])


def fit(config: TrainConfig) -> dict:
    """Train; returns the summary written to OUT/summary.json."""
    info = describe(config)
    require_finite(info, config)
    setup_distributed(config.device)  # first: the datasets split by the process group's rank
    train_set, val_set = datasets(info, config)
    order = torch.Generator()  # a loose folder's shuffle; packed data shuffle themselves
    loader = packer.DataLoader(train_set, batch_size=config.batch_size,
                               num_workers=config.workers, pin_memory=use_cuda(config.device),
                               shuffle=info.files is not None, generator=order)
    val_loader = val_set and packer.DataLoader(val_set, batch_size=config.batch_size,
                                               num_workers=config.workers)
    run = build(config, max(len(loader), 1), info)
    start, best, best_epoch, stale = 0, None, -1, 0
    if run.main:
        run.out.mkdir(parents=True, exist_ok=True)
    if config.resume:
        if not (run.out / "last.pt").exists():
            raise PackerError(f"--resume: no checkpoint in {run.out} (last.pt)")
        start, best, best_epoch, stale = _restore(run)
    elif run.main:
        (run.out / "metrics.jsonl").unlink(missing_ok=True)
    writer = _tensorboard(run)
    for epoch in range(start, config.epochs):
        torch.manual_seed(config.seed * 100_003 + epoch)  # dropout: the same after a resume
        order.manual_seed(config.seed * 100_003 + epoch)
        if hasattr(train_set, "set_epoch"):
            train_set.set_epoch(epoch)
        train = train_epoch(run, loader, epoch)
        val = evaluate(run, val_loader) if val_loader else None
        broken = _broken(run, val)
        if broken:
            raise PackerError(_diverged(run, f"epoch {epoch + 1}: {broken}"))
        score = _monitor(run, val, train)
        if isinstance(run.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            run.scheduler.step(-score if run.info.task == "regress" else score)
        improved = best is None or score > best
        best, best_epoch, stale = ((score, epoch, 0) if improved else (best, best_epoch, stale + 1))
        record = {"epoch": epoch + 1, "lr": run.optimizer.param_groups[0]["lr"],
                  "train": train, "val": val}
        run.history.append({"epoch": epoch + 1, "score": score})
        if run.main:
            _log(run, writer, record)
            state = _state(run, epoch, best, best_epoch, stale)
            checkpoint.save(run.out / "last.pt", state)
            if improved:
                checkpoint.save(run.out / "best.pt", state)
            print(_epoch_line(record), flush=True)
        if config.patience is not None and stale >= config.patience:
            break
    return _finish(run, writer, best_epoch)


def _tensorboard(run: Run):
    if not run.main:
        return None
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(str(run.out / "tensorboard"))


def _epoch_line(record: dict) -> str:
    train, val = record["train"], record["val"] or {}
    parts = [f"epoch {record['epoch']}", f"loss {train['loss']:.4f}"]
    parts += [f"val {k} {val[k]:.4f}" for k in ("loss", "accuracy", "mae", "rmse") if k in val]
    parts += [f"{train['samples_per_s']:,.0f} samples/s",
              f"waiting for data {100 * train['data_wait_share']:.0f}%"]
    return ", ".join(parts)


def _finish(run: Run, writer, best_epoch: int) -> dict:
    lines = [json.loads(line) for line in (run.out / "metrics.jsonl").read_text().splitlines()
             ] if run.main else []
    best = next((r for r in lines if r["epoch"] == best_epoch + 1), lines[-1] if lines else {})
    epochs = max(len(lines), 1)
    summary = {"best_epoch": best_epoch + 1, "best": best, "epochs_run": len(lines),
               "samples_per_s": sum(r["train"]["samples_per_s"] for r in lines) / epochs,
               "data_wait_share": sum(r["train"]["data_wait_share"] for r in lines) / epochs}
    if run.main:
        (run.out / "summary.json").write_text(json.dumps(strict_json(summary), indent=1,
                                                         allow_nan=False))
        writer.close()
    if run.world > 1:
        dist.barrier()
    return summary
