"""`--weights FILE`: the weights files users have (a checkpoint `train` wrote, a plain
state_dict saved by torch.save, a .safetensors file; torchvision's or timm's names)
loaded into a model, with a count of what was loaded and skipped and why. A file that
covers less than half of the model's backbone is refused, naming the architecture it
seems to be for."""

from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from packer.errors import PackerError
from train import checkpoint, pretrained

MOST = 0.5  # share of the backbone's values a file must provide
WRAPPERS = ("module.", "_orig_mod.", "model.")  # DDP, torch.compile, Lightning
KNOWN = {  # architectures a foreign file is compared with, to say what it is for
    "torchvision": ("resnet18", "resnet34", "resnet50", "resnet101", "mobilenet_v2",
                    "mobilenet_v3_small", "mobilenet_v3_large", "efficientnet_b0",
                    "efficientnet_b1", "convnext_tiny", "regnet_y_400mf", "densenet121",
                    "shufflenet_v2_x1_0", "vit_b_16", "swin_t"),
    "timm": ("resnet18", "resnet26", "resnet50", "mobilenetv2_100", "mobilenetv3_small_050",
             "mobilenetv3_small_100", "mobilenetv3_large_100", "efficientnet_b0",
             "convnext_tiny", "vit_tiny_patch16_224", "vit_small_patch16_224"),
}


@dataclass
class WeightsFile:
    path: Path
    state: dict[str, torch.Tensor]
    model: str | None = None  # the --model of a checkpoint train wrote
    classes: list[str] | None = None  # and its classes


@dataclass
class Loaded:
    """What a file gave a model: tensor names by outcome."""
    loaded: list[str] = field(default_factory=list)
    adapted: list[str] = field(default_factory=list)  # first conv summed to fewer channels
    head: list[str] = field(default_factory=list)  # replaced for the dataset
    mismatched: list[tuple[str, tuple, tuple]] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)  # in the file, not in the model
    absent: list[str] = field(default_factory=list)  # in the model, not in the file
    in_order: bool = False  # names differ, matched by position

    def report(self, path: Path, outputs: int) -> str:
        parts = [f"--weights {path}: {len(self.loaded) + len(self.adapted)} tensors loaded"]
        if self.in_order:
            parts.append("(the file's names are another library's for the same "
                         "architecture: matched in order)")
        if self.adapted:
            parts.append(f"({', '.join(self.adapted)} summed over its input channels for "
                         "these images)")
        skipped = len(self.head) + len(self.mismatched) + len(self.unknown)
        parts.append(f"; {skipped} skipped")
        if self.head:
            parts.append(f"; the head ({_names(self.head)}) replaced for {outputs:,} outputs")
        if self.mismatched:
            shown = ", ".join(f"{n} {list(f)} in the file, {list(m)} in the model"
                              for n, f, m in self.mismatched[:3])
            parts.append(f"; {len(self.mismatched)} of another shape ({shown}"
                         f"{', ...' if len(self.mismatched) > 3 else ''})")
        if self.unknown:
            parts.append(f"; {len(self.unknown)} with a name not in the model "
                         f"({_names(self.unknown)})")
        if self.absent:
            parts.append(f"; {len(self.absent)} of the model's tensors not in the file, left "
                         f"as initialised ({_names(self.absent)})")
        return "".join(parts)


def _names(names: list[str], shown: int = 4) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown
                                       else "")


def read(path: str) -> WeightsFile:
    """The tensors of a weights file, under the model's own names (wrappers' prefixes
    such as DDP's module. taken off)."""
    file = Path(path)
    if not file.is_file():
        raise PackerError(f"--weights {path}: no such file")
    if file.suffix == ".safetensors":
        state, model, classes = _safetensors(file), None, None
    else:
        saved = checkpoint.load(file, torch.device("cpu"), instead=(
            "give --weights a checkpoint train wrote (best.pt or last.pt), a state_dict "
            "saved with torch.save, or a .safetensors file"))
        config = saved.get("config") if isinstance(saved, dict) else None
        model = config.get("model") if isinstance(config, dict) else None
        classes = (saved.get("data") or {}).get("classes") if model else None
        state = _unwrap(saved, file)
    return WeightsFile(file, _without_wrappers(state), model, classes)


def _safetensors(file: Path) -> dict:
    from safetensors.torch import load_file

    try:
        return load_file(str(file), device="cpu")
    except Exception as err:  # safetensors reports a damaged file as several types
        raise PackerError(f"--weights {file}: not a readable .safetensors file "
                          f"({type(err).__name__}: {err})") from None


def _unwrap(saved, file: Path) -> dict:
    """The state_dict inside what torch.save wrote: itself, or under model, state_dict,
    model_state_dict."""
    for key in ("model", "state_dict", "model_state_dict"):
        if isinstance(saved, dict) and isinstance(saved.get(key), dict):
            saved = saved[key]
            break
    if not isinstance(saved, dict) or not saved or not all(
            isinstance(v, torch.Tensor) for v in saved.values()):
        raise PackerError(f"--weights {file}: holds no state_dict (a dict of tensor names to "
                          "tensors, as model.state_dict() gives)")
    return saved


def _without_wrappers(state: dict) -> dict:
    for prefix in WRAPPERS:
        if all(name.startswith(prefix) for name in state):
            state = {name.removeprefix(prefix): value for name, value in state.items()}
    return state


def load(model: nn.Module, file: WeightsFile, model_name: str, outputs: int,
         keep_head: bool) -> Loaded:
    """Load `file` into `model` (built for `model_name`); the head is kept only when
    `keep_head` and its shape fits. Raises when less than most of the backbone loads."""
    own = model.state_dict()
    heads = pretrained.head_names(model)
    state, in_order = _matched(file.state, own, heads)
    result, fitting = Loaded(in_order=in_order), {}
    for name, value in state.items():
        if name not in own:
            result.unknown.append(name)
        elif name in heads and not (keep_head and value.shape == own[name].shape):
            result.head.append(name)
        elif value.shape == own[name].shape:
            fitting[name] = value
            result.loaded.append(name)
        elif _adaptable(value, own[name]):
            fitting[name] = pretrained.adapt_conv_weight(value, own[name].shape[1])
            result.adapted.append(name)
        else:
            result.mismatched.append((name, tuple(value.shape), tuple(own[name].shape)))
    result.absent = [n for n in own if n not in state and n not in heads and _counted(n)]
    backbone = [n for n in own if n not in heads and _counted(n)]
    share = sum(own[n].numel() for n in backbone if n in fitting) / max(
        sum(own[n].numel() for n in backbone), 1)
    if share < MOST:
        raise PackerError(_refusal(file, model_name, share, result))
    model.load_state_dict(fitting, strict=False)
    return result


def _counted(name: str) -> bool:
    return not name.endswith("num_batches_tracked")


def _adaptable(value: torch.Tensor, target: torch.Tensor) -> bool:
    """A first convolution for RGB going into a model for other channels."""
    return (value.ndim == 4 and value.shape[1] == 3 and value.shape[0] == target.shape[0]
            and value.shape[2:] == target.shape[2:])


def _matched(state: dict, own: dict, heads: set) -> tuple[dict, bool]:
    """The file's tensors under the model's names: by name, or, when few names agree
    but every tensor's shape does in order (timm's mobilenetv2_100 and torchvision's
    mobilenet_v2), by position."""
    body = [n for n in own if n not in heads and _counted(n)]
    if sum(n in state for n in body) >= MOST * len(body):
        return state, False
    theirs = [n for n in state if _counted(n)]
    if len(theirs) >= len(body) and all(
            state[t].shape == own[o].shape for t, o in zip(theirs, body, strict=False)):
        renamed = dict(zip(body, (state[t] for t in theirs), strict=False))
        rest = theirs[len(body):]
        own_heads = [n for n in own if n in heads]
        renamed.update(zip(own_heads, (state[t] for t in rest), strict=False))
        renamed.update({t: state[t] for t in rest[len(own_heads):]})
        return renamed, True
    return state, False


def _refusal(file: WeightsFile, model_name: str, share: float, result: Loaded) -> str:
    seems = f"--model {file.model} (a run train wrote)" if file.model else guess(file.state)
    return (f"--weights {file.path}: only {share:.0%} of the backbone of --model {model_name} "
            f"is in this file ({len(result.loaded) + len(result.adapted)} tensors fit; "
            f"{len(result.mismatched)} of another shape, {len(result.unknown)} names not in "
            f"the model), so the run would start from random weights. The file seems to be "
            f"for {seems}: use that --model, or a file made for {model_name}.")


def guess(state: dict) -> str:
    """The known architecture whose tensors (names and shapes) best cover `state`."""
    wanted = {(n, tuple(v.shape)) for n, v in state.items() if _counted(n)}
    best, score = None, 0.0
    for library, names in KNOWN.items():
        for name in names:
            theirs = _meta_state(library, name)
            if theirs is None:
                continue
            share = len(wanted & theirs) / max(len(wanted | theirs), 1)
            if share > score:
                best, score = f"{library}:{name}", share
    if best and score >= 0.8:
        return f"--model {best} ({score:.0%} of the names and shapes agree)"
    first = ", ".join(list(state)[:3])
    return f"an architecture not among the ones known here (its first tensors: {first})"


def _meta_state(library: str, name: str) -> set | None:
    """(name, shape) of a model's tensors, built without memory on the meta device."""
    try:
        with torch.device("meta"):
            if library == "timm":
                model = pretrained._timm().create_model(name)
            else:
                from torchvision import models as zoo

                model = zoo.get_model(name)
    except Exception:  # an architecture this library version lacks is left out of the guess
        return None
    return {(n, tuple(v.shape)) for n, v in model.state_dict().items() if _counted(n)}
