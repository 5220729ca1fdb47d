"""Compact models defined here (no downloads), chosen from the data, or timm's and
torchvision's (train.pretrained)."""

import math

import torch
from torch import nn

from packer.errors import PackerError
from train import pretrained as library
from train import weights


def norm_layer(kind: str, channels: int, dims: int = 2) -> nn.Module:
    """BatchNorm, or GroupNorm (groups of channels: independent of the batch size, so
    right for the small batches that make BatchNorm's statistics noisy)."""
    if kind == "group":
        return nn.GroupNorm(math.gcd(channels, 8), channels)
    return nn.BatchNorm2d(channels) if dims == 2 else nn.BatchNorm1d(channels)


class BasicBlock(nn.Module):
    def __init__(self, inputs: int, outputs: int, stride: int, norm: str = "batch"):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False), norm_layer(norm, outputs),
            nn.ReLU(inplace=True),
            nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False), norm_layer(norm, outputs))
        self.skip = (nn.Identity() if stride == 1 and inputs == outputs else nn.Sequential(
            nn.Conv2d(inputs, outputs, 1, stride, bias=False), norm_layer(norm, outputs)))

    def forward(self, x):
        return torch.relu(self.body(x) + self.skip(x))


class SmallResNet(nn.Module):
    """A ResNet-style CNN for small images: a stem, three stages, pooling, a head."""

    def __init__(self, outputs: int, width: int = 32, dropout: float = 0.0, channels: int = 3,
                 norm: str = "batch"):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(channels, width, 3, 1, 1, bias=False), norm_layer(norm, width),
            nn.ReLU(True), BasicBlock(width, width, 1, norm),
            BasicBlock(width, 2 * width, 2, norm), BasicBlock(2 * width, 4 * width, 2, norm),
            nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Sequential(nn.Dropout(dropout), nn.Linear(4 * width, outputs))

    def forward(self, x):
        return self.head(self.backbone(x))


class MLP(nn.Module):
    """For feature vectors (normalised before they come in): two hidden layers beside a
    linear layer from the inputs to the outputs, so that a table a linear model fits
    well is fitted at least as well, and the hidden layers learn what it misses."""

    def __init__(self, inputs: int, outputs: int, hidden: int = 256, dropout: float = 0.0):
        super().__init__()
        self.linear = nn.Linear(inputs, outputs)  # first: the head stays the last Linear
        self.backbone = nn.Sequential(nn.Linear(inputs, hidden), nn.ReLU(True),
                                      nn.Dropout(dropout), nn.Linear(hidden, hidden),
                                      nn.ReLU(True))
        self.head = nn.Sequential(nn.Dropout(dropout), nn.Linear(hidden, outputs))

    def forward(self, x):
        return self.head(self.backbone(x)) + self.linear(x)


class CNN1D(nn.Module):
    """For windows of sensor records, (channels, time)."""

    def __init__(self, channels: int, outputs: int, width: int = 64, dropout: float = 0.0,
                 norm: str = "batch"):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv1d(channels, width, 5, padding=2), norm_layer(norm, width, 1), nn.ReLU(True),
            nn.Conv1d(width, width, 5, stride=2, padding=2), norm_layer(norm, width, 1),
            nn.ReLU(True), nn.Conv1d(width, 2 * width, 5, stride=2, padding=2),
            norm_layer(norm, 2 * width, 1), nn.ReLU(True), nn.AdaptiveAvgPool1d(1),
            nn.Flatten())
        self.head = nn.Sequential(nn.Dropout(dropout), nn.Linear(2 * width, outputs))

    def forward(self, x):
        return self.head(self.backbone(x))


MODELS = {"resnet": "image", "mlp": "vector", "cnn1d": "sequence"}
_AUTO = {"image": "resnet", "vector": "mlp", "sequence": "cnn1d"}


def build(name: str, kind: str, input_shape: tuple, outputs: int, dropout: float,
          width: int | None = None, norm: str = "batch", pretrained: bool = False) -> nn.Module:
    """The model for `kind` data; `width` (None: the model's own default) and `norm` apply
    to the built-in models, `pretrained` to timm's and torchvision's."""
    if name == "auto":
        name = _AUTO[kind]
    family = "image" if library.is_library_model(name) else MODELS.get(name)
    if family is None:
        raise PackerError(f"--model {name}: use one of auto, {', '.join(MODELS)}, "
                          f"{library.TIMM}NAME (e.g. {library.TIMM}resnet18) or "
                          f"{library.TORCHVISION}NAME (e.g. {library.TORCHVISION}resnet18)")
    if family != kind:
        raise PackerError(f"--model {name} is for {family} data; this dataset holds "
                          f"{kind} data")
    if library.is_library_model(name):
        return library.build(name, outputs, input_shape[0], pretrained)
    if name == "resnet":
        return SmallResNet(outputs, width or 32, dropout, input_shape[0], norm)
    if name == "mlp":
        return MLP(input_shape[0], outputs, width or 256, dropout)
    return CNN1D(input_shape[0], outputs, width or 64, dropout, norm)


def scale_outputs(model: nn.Module, mean, std) -> None:
    """Regression: the model predicts standardised targets and its outputs are mapped
    back to the targets' own units (the mean and std are buffers, so they are saved
    with the weights), so that a fresh model starts at the mean whatever its scale.
    `mean` and `std` are numbers, or one per target."""
    model.register_buffer("target_mean", torch.as_tensor(mean, dtype=torch.float32))
    model.register_buffer("target_std", torch.as_tensor(std, dtype=torch.float32))
    model.register_forward_hook(
        lambda module, args, output: output * module.target_std + module.target_mean)


def load_weights(model: nn.Module, path: str, name: str, outputs: int,
                 classes: list[str] | None) -> str:
    """Start from a weights file; the head is kept only from a run train wrote for the
    same classes. Returns what was loaded and skipped, to print."""
    file = weights.read(path)
    keep = file.model is not None and file.classes == classes
    return weights.load(model, file, name, outputs, keep).report(file.path, outputs)
