"""The one configuration of a run, saved into every checkpoint as a plain dict.

A field left at None (or "auto") is chosen from the data by `train.recipe` before
training starts; the checkpoint keeps the chosen values."""

from dataclasses import asdict, dataclass, fields

TASKS = ("auto", "classify", "multilabel", "regress")
OPTIMIZERS = ("auto", "adamw", "adam", "sgd")
SCHEDULES = ("cosine", "step", "plateau", "constant")
AMP_MODES = ("auto", "bf16", "fp16", "off")
DEVICES = ("auto", "cpu", "cuda")
AUGMENTS = ("none", "light", "flip", "strong", "randaugment", "trivialaugment")
NORMS = ("auto", "batch", "group")
CACHES = ("auto", "ram", "off")
LOSSES = ("auto", "mse", "l1", "focal")


@dataclass
class TrainConfig:
    data: str = ""
    mix: list[str] | None = None  # several datasets mixed (data: the first; train.mixing)
    mix_weights: list[float] | None = None  # their proportions (None: by their sizes)
    out: str = "runs/exp"
    val: str | None = None  # a second packed dataset, or:
    val_split: float | None = None  # the fraction of `data` held out (0: none; None: auto)
    val_split_name: str | None = None  # a pack-time split of `data` to validate on
    task: str = "auto"
    model: str = "auto"
    width: int | None = None  # channels of the CNNs, hidden units of the MLP
    norm: str = "auto"
    num_classes: int | None = None
    image_size: int | None = None
    inputs: str | None = None  # array fields that make the input, "a,b" (None: the default)
    epochs: int | None = None
    batch_size: int | None = None
    workers: int = 2
    cache_dir: str | None = None  # where parts of an s3:// dataset are kept (None: the default)
    cache_limit: int | None = None  # bytes they may take there (None: the default)
    cache: str = "auto"
    optimizer: str = "auto"  # adamw; sgd when fine-tuning (train.finetune)
    lr: float | None = None  # None: a short range test picks it
    weight_decay: float | None = None
    momentum: float = 0.9
    schedule: str = "cosine"
    warmup_epochs: float = 1.0
    step_epochs: int = 10
    scale_lr: bool = False
    reference_batch: int = 256
    clip_grad: float | None = None
    accumulate: int = 1  # batches whose gradients make one optimizer step
    ema: bool = False  # keep, validate and save an average of the weights (train.ema)
    ema_decay: float = 0.999
    device: str = "auto"
    amp: str = "auto"
    channels_last: bool = True  # image models only: faster convolutions on CPUs and GPUs
    dropout: float | None = None
    label_smoothing: float = 0.0
    class_weights: str | None = None  # "auto": inverse class frequency from the manifest
    loss: str = "auto"  # classification: "focal"; regression: "mse" or "l1"
    focal_gamma: float = 2.0
    mixup: float = 0.0  # Beta(alpha, alpha) mixing of whole batches (0: off)
    cutmix: float = 0.0
    patience: int | None = None
    time_limit: float | None = None  # minutes, then stop after the epoch (0: none; None: auto)
    folds: int | None = None  # k-fold cross-validation: a run per fold (train.folds)
    fold: int | None = None  # the fold this run validates on (set by train.folds)
    monitor: str = "auto"  # the metric of the best epoch and early stopping (train.monitor)
    augment: str = "light"
    random_erasing: float = 0.0  # the chance of a box of each training image blanked
    log_every: int = 0  # log every Nth step's loss and lr (0: epochs only)
    seed: int = 0
    deterministic: bool = False  # torch's deterministic algorithms (cuDNN's too)
    weights: str | None = None
    pretrained: bool = False  # a timm or torchvision model's own pretrained weights
    freeze_epochs: int | None = None  # fine-tuning: epochs of the head alone (None: auto)
    backbone_lr_scale: float | None = None  # fine-tuning: the backbone's share (None: auto)
    freeze_backbone: bool = False
    freeze_stem: bool = True  # fine-tuning: the layers to a quarter of the input's side
    resume: bool = False

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "TrainConfig":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def effective_lr(self) -> float:
        """The linear scaling rule, when asked: lr grows with the batch size."""
        if self.scale_lr:
            return self.lr * self.batch_size / self.reference_batch
        return self.lr
