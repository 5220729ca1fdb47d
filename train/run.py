"""A run's parts: the device, the process group, the model, optimizer and schedule."""

import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from packer.errors import PackerError
from train import ema, finetune, models
from train.config import TrainConfig
from train.data import DataInfo
from train.losses import loss_function
from train.step import set_seed


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
    notes: list[str] = field(default_factory=list)  # lines to print before training
    frozen: bool = False  # the backbone, while the head trains alone
    ema: nn.Module | None = None  # --ema: the average of the weights (train.ema)
    stopped_by: str | None = None  # what ended the run before its epochs: patience, time

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


def rank0_value(value: float) -> float:
    """Rank 0's value on every rank, for choices that must agree (a rank's own figure,
    such as its free memory or its range test, may differ)."""
    if not (dist.is_available() and dist.is_initialized()):
        return value
    device = (torch.device("cuda", torch.cuda.current_device())
              if dist.get_backend() == "nccl" else torch.device("cpu"))
    number = torch.tensor([value], dtype=torch.float64, device=device)
    dist.broadcast(number, src=0)
    return number.item()


def any_rank(flag: bool) -> bool:
    """Whether `flag` holds on some rank (so that all ranks stop a loop together)."""
    if not (dist.is_available() and dist.is_initialized()):
        return flag
    device = (torch.device("cuda", torch.cuda.current_device())
              if dist.get_backend() == "nccl" else torch.device("cpu"))
    number = torch.tensor([float(flag)], device=device)
    dist.all_reduce(number, op=dist.ReduceOp.MAX)
    return bool(number.item())


@contextmanager
def deterministic(on: bool):
    """--deterministic: torch's deterministic algorithms and cuDNN's, for the block;
    what was set before comes back after. An operation with no deterministic version
    on the GPU (adaptive average pooling's backward, in most CNNs) warns rather than
    stops the run."""
    saved = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic,
             torch.backends.cudnn.benchmark, os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
             torch.is_deterministic_algorithms_warn_only_enabled())
    if on:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # what cuBLAS needs
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(saved[0], warn_only=saved[4])
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved[1:3]
        if saved[3] is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)


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


def make_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    """Every parameter, frozen ones too (they take no step while they have no gradient)."""
    groups = finetune.parameter_groups(model, config)
    lr = config.effective_lr()
    for group in groups:
        group["lr"] = lr * group["lr_scale"]
    if config.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=config.momentum, nesterov=True)
    if config.optimizer == "adam":
        return torch.optim.Adam(groups, lr=lr)
    return torch.optim.AdamW(groups, lr=lr)


def build(config: TrainConfig, steps_per_epoch: int, info: DataInfo) -> Run:
    rank, world, local_rank = setup_distributed(config.device)
    device = pick_device(local_rank, config.device)
    set_seed(config.seed)  # the same initial weights on every rank and every run
    finetune.refuse_misuse(config)
    model = models.build(config.model, info.kind, info.input_shape, info.num_outputs,
                         config.dropout or 0.0, config.width, config.norm, config.pretrained)
    notes = [models.load_weights(model, config.weights, config.model, info.num_outputs,
                                 info.classes)] if config.weights else []
    if info.target_stats:
        models.scale_outputs(model, info.target_stats["mean"], info.target_stats["std"])
    model = model.to(device, memory_format=torch.channels_last if config.channels_last
                     else torch.preserve_format)  # moves 4-D weights only: image models'
    if world > 1:
        model = nn.parallel.DistributedDataParallel(
            model, device_ids=[local_rank] if device.type == "cuda" else None)
    optimizer = make_optimizer(model, config)
    if config.schedule == "plateau":
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.3, patience=2)
    else:
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, finetune.schedules(optimizer.param_groups, steps_per_epoch, config))
    dtype = amp_dtype(config.amp, device)
    scaler = torch.amp.GradScaler(device.type) if dtype == torch.float16 else None
    loss = loss_function(info.task, info.class_counts, config).to(device)
    average = ema.averaged(model.module if world > 1 else model,
                           config.ema_decay) if config.ema else None
    return Run(config, info, device, model, optimizer, scheduler, scaler, dtype, loss, rank,
               world, Path(config.out), notes=notes, ema=average)
