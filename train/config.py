"""The one configuration of a run, saved into every checkpoint as a plain dict."""

from dataclasses import asdict, dataclass, fields

TASKS = ("auto", "classify", "multilabel", "regress")
OPTIMIZERS = ("adamw", "adam", "sgd")
SCHEDULES = ("cosine", "step", "plateau", "constant")
AMP_MODES = ("auto", "bf16", "fp16", "off")
DEVICES = ("auto", "cpu", "cuda")


@dataclass
class TrainConfig:
    data: str = ""
    out: str = "runs/exp"
    val: str | None = None  # a second packed dataset, or:
    val_split: float = 0.1  # the fraction of `data` held out (0: no validation)
    task: str = "auto"
    model: str = "auto"
    num_classes: int | None = None
    image_size: int = 64
    inputs: str | None = None  # array fields that make the input, "a,b" (None: the default)
    epochs: int = 10
    batch_size: int = 64
    workers: int = 2
    optimizer: str = "adamw"
    lr: float = 3e-4
    weight_decay: float = 0.05
    momentum: float = 0.9
    schedule: str = "cosine"
    warmup_epochs: float = 1.0
    step_epochs: int = 10
    scale_lr: bool = False
    reference_batch: int = 256
    clip_grad: float | None = None
    device: str = "auto"
    amp: str = "auto"
    channels_last: bool = False
    dropout: float = 0.0
    label_smoothing: float = 0.0
    class_weights: str | None = None  # "auto": inverse class frequency from the manifest
    loss: str = "auto"  # regression: "mse" or "l1"
    patience: int | None = None
    augment: bool = True
    seed: int = 0
    weights: str | None = None
    freeze_backbone: bool = False
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
