"""Image models of timm and torchvision (`--model timm:NAME`, `torchvision:NAME`), with
their pretrained weights taken from each library's own cache and hub (`--pretrained`),
the head replaced for the dataset's outputs and the first convolution adapted to its
channels. Also the preprocessing each model's weights were trained with."""

import difflib
import os
import socket
from pathlib import Path

import torch
from torch import nn

from packer.errors import PackerError

TIMM, TORCHVISION = "timm:", "torchvision:"
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def is_library_model(name: str) -> bool:
    return name.startswith((TIMM, TORCHVISION))


def build(name: str, outputs: int, channels: int, pretrained: bool) -> nn.Module:
    """A timm or torchvision model for `outputs` classes (or values) and images of
    `channels` channels; with `pretrained`, its ImageNet weights and a new head."""
    if name.startswith(TIMM):
        return _timm_model(name.removeprefix(TIMM), outputs, channels, pretrained)
    model = _torchvision_model(name.removeprefix(TORCHVISION), outputs, pretrained)
    if pretrained:
        replace_head(model, outputs)
    adapt_first_conv(model, channels)
    return model


def _timm():
    import timm

    return timm


def _check_timm_name(name: str, pretrained: bool) -> None:
    timm = _timm()
    known = timm.list_models(pretrained=pretrained) if pretrained else timm.list_models()
    if name.split(".")[0] not in {n.split(".")[0] for n in known}:
        close = difflib.get_close_matches(name, timm.list_models(), n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        weights = " with pretrained weights" if pretrained else ""
        raise PackerError(f"--model {TIMM}{name}: timm has no model of that name{weights}."
                          f"{hint} To list them: python -c \"import timm; "
                          f"print(timm.list_models('*{name[:4]}*', pretrained=True))\"")


def _timm_model(name: str, outputs: int, channels: int, pretrained: bool) -> nn.Module:
    timm = _timm()
    _check_timm_name(name, pretrained)
    cache = hf_cache()
    cfg = timm.models.get_pretrained_cfg(name, allow_unregistered=True) if pretrained else None
    repo = getattr(cfg, "hf_hub_id", None) or name
    cached = _cached_weights(cfg, cache) if pretrained else None
    try:
        if pretrained and cached is None:
            _reach_hub()
        model = timm.create_model(name, pretrained=pretrained, num_classes=outputs,
                                  in_chans=channels, cache_dir=cache,
                                  pretrained_cfg_overlay={"file": cached} if cached else None)
    except Exception as err:  # the hub client reports a missing file in many types
        if not pretrained or not _download_failure(err):
            raise
        raise PackerError(_missing(f"{TIMM}{name}", Path(cache) / _hf_folder(repo),
                                   f"the Hugging Face hub's {repo}", err)) from None
    if pretrained:
        model.reset_classifier(outputs)  # also for 1,000 classes: not ImageNet's
    return model


def _cached_weights(cfg, cache: str) -> str | None:
    """The file of `cfg`'s weights in the hub cache, if it is there: loaded from it, the
    hub is not asked (offline, its client retries for half a minute before it gives up)."""
    repo = getattr(cfg, "hf_hub_id", None)
    if not repo:
        return None
    from huggingface_hub import try_to_load_from_cache

    names = (getattr(cfg, "hf_hub_filename", None), "model.safetensors", "pytorch_model.bin")
    for filename in filter(None, names):
        found = try_to_load_from_cache(repo.split("@")[0], filename, cache_dir=cache)
        if isinstance(found, str):
            return found
    return None


def _reach_hub() -> None:
    """Fail at once where the hub's name does not resolve (no network), rather than
    after the client's retries."""
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return  # the client fails at once itself
    host = urlparse(constants.ENDPOINT).hostname
    try:
        socket.getaddrinfo(host, 443)
    except OSError as err:
        raise ConnectionError(f"no network: {host} does not resolve ({err})") from None


def _hf_folder(repo: str) -> str:
    return "models--" + repo.replace("/", "--")


def hf_cache() -> str:
    """The Hugging Face hub cache timm reads (HF_HUB_CACHE, HF_HOME, or the default),
    as the environment says now."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return os.path.join(os.environ["HF_HOME"], "hub")
    from huggingface_hub import constants

    return constants.HF_HUB_CACHE


def _download_failure(err: Exception) -> bool:
    """Whether `err` says the weights file is neither cached nor downloadable."""
    names = {type(e).__name__ for e in (err, err.__cause__, err.__context__) if e}
    return bool(names & {"LocalEntryNotFoundError", "URLError", "ConnectionError",
                         "OfflineModeIsEnabled", "HTTPError", "gaierror", "timeout"}) or \
        isinstance(err, OSError | ConnectionError)


def _missing(model: str, folder: Path, source: str, err: Exception) -> str:
    reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return (f"--model {model} --pretrained: its weights are not in the library's cache "
            f"({folder} was looked in) and could not be fetched from {source} ({reason}). "
            f"Either put them in that cache (run the same command once on a machine with "
            f"internet and copy {folder} over, or point TORCH_HOME / HF_HUB_CACHE at a copy), "
            f"or give the file itself: --weights FILE (a state_dict, a .safetensors file or "
            f"a checkpoint train wrote).")


def _torchvision_model(name: str, outputs: int, pretrained: bool) -> nn.Module:
    try:
        from torchvision import models as zoo
    except ImportError:
        raise PackerError(
            f"--model {TORCHVISION}{name} needs torchvision, which is not installed here: "
            "pip install torchvision (the build that matches your torch, see "
            "https://pytorch.org/get-started/locally/). The built-in models (auto, resnet, "
            "mlp, cnn1d) need nothing more.") from None
    names = zoo.list_models(module=zoo)
    if name not in names:
        close = difflib.get_close_matches(name, names, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise PackerError(
            f"--model {TORCHVISION}{name}: torchvision has no image classifier of that name."
            f"{hint} To see them all: python -c \"import torchvision.models as m; "
            "print(m.list_models(module=m))\"")
    if not pretrained:
        return zoo.get_model(name, weights=None, num_classes=outputs)
    weights = zoo.get_model_weights(name).DEFAULT
    folder = Path(torch.hub.get_dir()) / "checkpoints"
    try:
        return zoo.get_model(name, weights=weights)
    except Exception as err:  # urllib and the hub report a failed download in many types
        if not _download_failure(err):
            raise
        raise PackerError(_missing(f"{TORCHVISION}{name}", folder / Path(weights.url).name,
                                   weights.url, err)) from None


def head(model: nn.Module) -> nn.Module:
    """The layer that maps features to outputs: timm's classifier, the built-in models'
    `head`, else the last nn.Linear (every torchvision classifier but SqueezeNet's)."""
    if hasattr(model, "get_classifier"):
        return model.get_classifier()
    if isinstance(getattr(model, "head", None), nn.Module):
        return model.head
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if not linears:
        raise PackerError(f"{type(model).__name__} has no nn.Linear layer as its head")
    return linears[-1]


def head_names(model: nn.Module) -> set[str]:
    """The state_dict names of the head's tensors."""
    layer = head(model)
    prefix = next(name for name, module in model.named_modules() if module is layer)
    return {f"{prefix}.{key}" if prefix else key for key in layer.state_dict()}


def replace_head(model: nn.Module, outputs: int) -> None:
    """A freshly initialised last Linear layer for `outputs` (whatever it had before)."""
    old = head(model)
    name = next(n for n, m in model.named_modules() if m is old)
    parent = model.get_submodule(name.rpartition(".")[0])
    setattr(parent, name.rpartition(".")[2],
            nn.Linear(old.in_features, outputs, bias=old.bias is not None))


STEM_STRIDE = 4  # the stem and first stage: detectron2 keeps them frozen (FREEZE_AT 2)


def stem(model: nn.Module, input_shape, device: torch.device) -> set[int]:
    """The ids of the parameters used before a convolution first reduces the input's side
    below a quarter: a CNN's stem and first stage (generic edge and colour filters, and the
    most costly layers to train at their resolution); none for a vision transformer, whose
    first convolution strides 16, and for models of tables and sequences. Found by running
    one blank input through the model."""
    if len(input_shape) != 3:
        return set()
    order, reduced, side = [], [], min(input_shape[1:])

    def seen(module, inputs, output):
        if reduced:
            return
        spatial = isinstance(module, nn.Conv2d) and min(inputs[0].shape[2:]) > 1  # not SE's
        if spatial and min(output.shape[2:]) * STEM_STRIDE < side:
            reduced.append(module)
        else:
            order.append(module)

    owners = [m for m in model.modules() if next(m.parameters(recurse=False), None) is not None]
    hooks = [m.register_forward_hook(seen) for m in owners]
    training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(torch.zeros(1, *input_shape, device=device))
    finally:
        for hook in hooks:
            hook.remove()
        model.train(training)
    if not reduced:
        return set()
    return {id(p) for module in order for p in module.parameters(recurse=False)}


def first_conv(model: nn.Module) -> tuple[str, nn.Conv2d] | None:
    return next(((n, m) for n, m in model.named_modules() if isinstance(m, nn.Conv2d)), None)


def adapt_first_conv(model: nn.Module, channels: int) -> None:
    """A first convolution for `channels` input channels, its weights adapted as timm's
    `in_chans` does (summed over the RGB channels for one grey channel)."""
    found = first_conv(model)
    if found is None or found[1].in_channels == channels:
        return
    name, conv = found
    adapted = nn.Conv2d(channels, conv.out_channels, conv.kernel_size, conv.stride,
                        conv.padding, conv.dilation, conv.groups, conv.bias is not None,
                        conv.padding_mode)
    with torch.no_grad():
        adapted.weight.copy_(adapt_conv_weight(conv.weight, channels))
        if conv.bias is not None:
            adapted.bias.copy_(conv.bias)
    parent = model.get_submodule(name.rpartition(".")[0])
    setattr(parent, name.rpartition(".")[2], adapted)


def adapt_conv_weight(weight: torch.Tensor, channels: int) -> torch.Tensor:
    """A (out, 3, k, k) convolution weight for `channels` inputs (timm's own rule)."""
    from timm.models import adapt_input_conv

    return adapt_input_conv(channels, weight)


def preprocessing(name: str, channels: int) -> dict:
    """The input a library model's weights expect: {"mean", "std" (0-1 units, one value
    a channel), "size" (a side), "interpolation", "fixed" (no other size)}. Grey images
    get the mean of the RGB values, as the first convolution sums over them."""
    config = {"input_size": (3, 224, 224), "interpolation": "bilinear",
              "mean": IMAGENET_MEAN, "std": IMAGENET_STD}
    fixed = False
    if name.startswith(TIMM):
        timm = _timm()
        _check_timm_name(name.removeprefix(TIMM), False)
        with torch.device("meta"):  # the config only: no memory, no weights
            model = timm.create_model(name.removeprefix(TIMM))
        config = timm.data.resolve_model_data_config(model)
        fixed = bool(model.pretrained_cfg.get("fixed_input_size"))
    mean, std = list(config["mean"]), list(config["std"])
    if channels != len(mean):
        mean = [sum(mean) / len(mean)] * channels
        std = [sum(std) / len(std)] * channels
    return {"mean": mean, "std": std, "size": int(config["input_size"][-1]),
            "interpolation": config["interpolation"], "fixed": fixed}
