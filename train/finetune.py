"""Fine-tuning a pretrained network (`--pretrained` or `--weights`): the input its
weights expect, the head trained alone first with the backbone frozen (BatchNorm
statistics too), then the whole network with the backbone at a lower rate.

    normalisation   a timm or torchvision model: the mean and std its weights were
                    trained with (timm's pretrained config; ImageNet's for torchvision)
    image size      the size the weights were trained at (e.g. 224) for images that
                    large or larger; smaller images keep their own size, upscaled only
                    below half of it, where features learned on ImageNet objects fail
    optimizer       SGD with momentum (AdamW from scratch): Adam's steps are of the rate's
                    size for every weight, and push the channels whose frozen statistics
                    have almost no variance far; one epoch after unfreezing, the loss of
                    a MobileNetV2 on 120 images went from 0.16 to 2.25 under AdamW
    freeze epochs   a fifth of the epochs (at least 1), a third under 50 training samples
                    a class: the new head settles before its gradients reach the backbone;
                    where the epochs too are chosen from the data, on top of them (their
                    budget of steps is the whole network's: on 30% of digits, 0.972,
                    0.947, 0.947 by seed with them inside, 0.978, 0.967, 0.964 on top)
    stem            kept frozen the whole run (`--no-freeze-stem` trains it once the backbone
                    unfreezes): the layers before the input's side falls under a quarter, as
                    detectron2 keeps a ResNet's stem and first stage frozen; without
                    their backward pass a MobileNetV2 at 112 px fine-tunes about 1.5 times
                    as fast on 2 CPU cores (all of digits: 97-123 to 147-181 samples/s)
    unfreezing      the backbone's rate warms up again over --warmup-epochs (its optimizer
                    state starts empty); its BatchNorm statistics stay frozen the whole
                    run (switched to each batch's own, they change at once the features
                    the head learned: on 30% of digits the training loss of the first
                    unfrozen epoch went from 0.42 to 1.92)
"""

import math
from functools import partial

from torch import nn

from packer.errors import PackerError
from train import pretrained
from train.config import TrainConfig
from train.data import DataInfo, image_sizes
from train.recipe import Choice, image_size
from train.schedule import lr_factor

FEW_PER_CLASS = 50
BACKBONE_SHARE = 0.01  # of the head's rate, once unfrozen
BACKBONE_MAX_LR = 2e-4  # the backbone's rate at most (stable to 2e-4, diverged from 5e-4)


def fine_tuning(config: TrainConfig) -> bool:
    return bool(config.pretrained or config.weights)


def refuse_misuse(config: TrainConfig) -> None:
    """Options that would do nothing (or nothing sensible) with this model."""
    if config.pretrained and not pretrained.is_library_model(config.model):
        raise PackerError(f"--pretrained needs a timm or torchvision model (e.g. --model "
                          f"timm:resnet18); --model {config.model} is built here and has no "
                          "pretrained weights (--weights FILE starts it from a file)")
    if config.freeze_backbone and not fine_tuning(config):
        raise PackerError("--freeze-backbone needs --pretrained or --weights: a backbone "
                          "worth keeping")
    if not config.freeze_stem and not fine_tuning(config):
        raise PackerError("--no-freeze-stem needs --pretrained or --weights: from random "
                          "weights every layer trains anyway")
    if config.freeze_epochs and not fine_tuning(config):
        raise PackerError(f"--freeze-epochs {config.freeze_epochs} needs --pretrained or "
                          "--weights: there is no pretrained backbone to keep frozen")


def prepare_images(config: TrainConfig, info: DataInfo) -> list[Choice]:
    """A library model's normalisation and, when fine-tuning, its image size (set on
    `config` and `info`); grey array images resized on the device when asked."""
    if info.kind != "image" or not pretrained.is_library_model(config.model):
        return _array_size(config, info, [])
    expected = pretrained.preprocessing(config.model, info.input_shape[0])
    info.model_input = {k: expected[k] for k in ("mean", "std", "interpolation")}
    choices = [Choice("normalisation", _shown(expected),
                      f"the mean and std {config.model}'s weights were trained with")]
    if fine_tuning(config) and config.image_size is None:
        choices.append(_pretrained_size(config, info, expected))
    return _array_size(config, info, choices)


def _shown(expected: dict) -> str:
    return (f"mean {', '.join(f'{v:.3f}' for v in expected['mean'])} std "
            f"{', '.join(f'{v:.3f}' for v in expected['std'])}")


def _pretrained_size(config: TrainConfig, info: DataInfo, expected: dict) -> Choice:
    trained = expected["size"]
    if info.decoded_images:
        own, _ = image_size(image_sizes(info, config), square=info.files is not None)
    else:
        own = tuple(info.input_shape[1:])
    sides = (own, own) if isinstance(own, int) else own
    least = trained // 2
    if min(sides) >= trained or expected.get("fixed"):
        size, why = trained, f"the size {config.model}'s weights were trained at"
    elif min(sides) >= least:
        size, why = own, (f"the images' own size: at least half the {trained} px the weights "
                          "were trained at")
    else:
        size = least
        why = (f"upscaled from {sides[1]}x{sides[0]}: the pretrained weights need objects at "
               f"least half the scale they were trained at ({trained} px)")
    config.image_size = size
    return Choice("image_size", size, why)


def _array_size(config: TrainConfig, info: DataInfo, choices: list) -> list[Choice]:
    """Array images (grey) take --image-size through an on-device resize."""
    if info.kind == "image" and not info.decoded_images and config.image_size is not None:
        size = config.image_size
        info.input_shape = (info.input_shape[0], *((size, size) if isinstance(size, int)
                                                   else size))
    elif info.decoded_images and config.image_size is not None:
        size = config.image_size
        info.input_shape = (3, *((size, size) if isinstance(size, int) else size))
    return choices


def choose_optimizer(config: TrainConfig) -> list[Choice]:
    """--optimizer auto: SGD when fine-tuning, else AdamW (not printed: the usual)."""
    if config.optimizer != "auto":
        return []
    if not fine_tuning(config):
        config.optimizer = "adamw"
        return []
    config.optimizer = "sgd"
    return [Choice("optimizer", "sgd", "fine-tuning: SGD's steps follow the gradient, where "
                   "Adam's are of the rate's size for every weight, and move the channels whose "
                   "frozen BatchNorm statistics have almost no variance far enough to wreck the "
                   "pretrained features")]


def choose(config: TrainConfig, info: DataInfo, samples: int,
           epochs: Choice | None = None) -> list[Choice]:
    """The fine-tuning recipe once the epochs are known: the optimizer, the frozen
    epochs, the backbone's rate; when not fine-tuning, the optimizer only. `epochs`:
    the recipe's choice of them, if it chose: the frozen epochs come on top of its
    budget of steps, which is the whole network's (the choice is changed to say so)."""
    choices = choose_optimizer(config)
    if not fine_tuning(config):
        config.freeze_epochs = config.freeze_epochs or 0
        return choices
    choices.append(Choice("batchnorm", "statistics frozen", "the backbone's BatchNorm "
                          "layers keep their pretrained statistics the whole run, as Keras's "
                          "transfer-learning guide keeps them: switched to each batch's own "
                          "when the backbone unfreezes, they change at once the features the "
                          "head learned"))
    if config.freeze_backbone:
        config.freeze_epochs = config.epochs
        return [Choice("freeze_epochs", config.epochs, "--freeze-backbone: the head alone "
                       "for the whole run (feature extraction)")]
    if config.freeze_stem:
        choices.append(Choice("freeze_stem", "yes", "the layers that see the input at a quarter "
                              "of its side or finer stay frozen once the backbone unfreezes, as "
                              "detectron2 keeps them: generic edge and colour filters, and the "
                              "costliest to train (without them a MobileNetV2 at 112 px fine-tunes "
                              "about 1.5 times as fast on 2 CPU cores)"))
    if config.freeze_epochs is None:
        per_class = samples / max(info.num_outputs, 1) if info.task == "classify" else samples
        share, why = ((3, f"a third of the epochs: under {FEW_PER_CLASS} training samples a "
                          "class") if per_class < FEW_PER_CLASS else (5, "a fifth of the epochs"))
        config.freeze_epochs = min(max(math.ceil(config.epochs / share), 1),
                                   max(config.epochs - 1, 1))
        choices.append(Choice("freeze_epochs", config.freeze_epochs, f"the new head alone "
                              f"first, backbone and its BatchNorm statistics frozen, so that "
                              f"its first large gradients do not wreck pretrained features: "
                              f"{why}, at least 1"))
        if epochs is not None:
            config.epochs = epochs.value = config.epochs + config.freeze_epochs
            epochs.why += (f", and the {config.freeze_epochs} with the backbone frozen on "
                           "top (the steps are the whole network's)")
    return choices


def choose_backbone_share(config: TrainConfig) -> list[Choice]:
    """--backbone-lr-scale auto, once the head's rate is known: a hundredth of it, less
    where the backbone would step faster than BACKBONE_MAX_LR."""
    if not fine_tuning(config) or config.freeze_backbone or config.backbone_lr_scale is not None:
        return []
    share = float(f"{min(BACKBONE_SHARE, BACKBONE_MAX_LR / config.lr):.3g}")
    config.backbone_lr_scale = share
    why = ("the backbone learns at this share of the head's rate once unfrozen, as fastai's "
           "fine_tune and Keras's guide do: faster, Adam's steps of the rate's size for every "
           "weight wreck pretrained features")
    if share < BACKBONE_SHARE:
        why = (f"a hundredth of the head's rate, lowered so that the backbone steps at "
               f"{BACKBONE_MAX_LR:g} at most: its frozen BatchNorm statistics scale each "
               "channel's step by its weight over its deviation, and a MobileNetV2 unfrozen "
               "at 1e-3 on 40 photos went to chance at once")
    return [Choice("backbone_lr_scale", share, why)]


def backbone_share(config: TrainConfig) -> float:
    """The backbone's share of the rate; a hundredth until the rate, and so the auto
    share, is known (the range test's model)."""
    return BACKBONE_SHARE if config.backbone_lr_scale is None else config.backbone_lr_scale


def stale_since_unfrozen(config: TrainConfig, epoch: int, stale: int) -> int:
    """The epochs without a better score that count towards early stopping: those since
    the backbone was unfrozen (a head trained alone levels off by design; a run stopped
    in that phase never fine-tunes)."""
    if config.freeze_backbone or not config.freeze_epochs:
        return stale
    return max(0, min(stale, epoch + 1 - config.freeze_epochs))


def frozen(config: TrainConfig, epoch: int) -> bool:
    return config.freeze_backbone or epoch < (config.freeze_epochs or 0)


def enter_epoch(run, epoch: int, first: bool = True) -> str | None:
    """Freeze or unfreeze the backbone for `epoch` (the `first` of this process) when
    fine-tuning; returns the line to print when the phase is set (DDP is wrapped again:
    it reduces what trains)."""
    if not fine_tuning(run.config):
        return None
    want = frozen(run.config, epoch)
    if not first and want == run.frozen:
        return None
    model = run.model.module if run.world > 1 else run.model
    heads = {id(p) for p in pretrained.head(model).parameters()}
    kept = set() if want or not run.config.freeze_stem else \
        pretrained.stem(model, run.info.input_shape, run.device)
    for parameter in model.parameters():
        parameter.requires_grad_(id(parameter) in heads or not (want or id(parameter) in kept))
    changed, run.frozen = want != run.frozen, want
    if run.world > 1 and changed:
        run.model = nn.parallel.DistributedDataParallel(
            model, device_ids=[run.device.index] if run.device.type == "cuda" else None)
    if want:
        return f"epoch {epoch + 1}: the head trains alone, the backbone frozen"
    but = (f" but its stem ({len(kept)} tensors to a quarter of the input's side, kept "
           "frozen)" if kept else "")
    return (f"epoch {epoch + 1}: the whole network trains{but}, the backbone at "
            f"{backbone_share(run.config):g} of the head's rate")




def train_mode(run) -> None:
    """model.train(), but when fine-tuning the backbone's BatchNorm layers keep their
    statistics, the whole run."""
    run.model.train()
    if not fine_tuning(run.config):
        return
    model = run.model.module if run.world > 1 else run.model
    head = pretrained.head(model)
    inside = {id(m) for m in head.modules()}
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and id(module) not in inside:
            module.eval()


def parameter_groups(model: nn.Module, config: TrainConfig) -> list[dict]:
    """Weight-decayed weights and undecayed biases and norm scales (decaying them only
    hurts); when fine-tuning, the head's at the rate and the backbone's at
    --backbone-lr-scale of it (`lr_scale`, which the range test keeps too)."""
    params = list(model.parameters())
    parts = [(params, 1.0)]
    if fine_tuning(config):
        heads = {id(p) for p in pretrained.head(model).parameters()}
        parts = [([p for p in params if id(p) in heads], 1.0),
                 ([p for p in params if id(p) not in heads], backbone_share(config))]
    groups = []
    for part, scale in parts:
        groups += [{"params": [p for p in part if p.ndim > 1], "lr_scale": scale,
                    "weight_decay": config.weight_decay or 0.0},
                   {"params": [p for p in part if p.ndim <= 1], "lr_scale": scale,
                    "weight_decay": 0.0}]
    return groups


def schedules(groups: list[dict], steps_per_epoch: int, config: TrainConfig) -> list:
    """Each parameter group's multiplier of its rate by step: the run's schedule, and
    for a backbone once unfrozen a warm-up again (Adam's first steps are full size)."""
    plain = partial(lr_factor, steps_per_epoch=steps_per_epoch, config=config)
    if not fine_tuning(config) or config.freeze_backbone or not config.freeze_epochs:
        return [plain for _ in groups]
    rewarmed = partial(_rewarmed, steps_per_epoch=steps_per_epoch, config=config)
    return [rewarmed if group["lr_scale"] != 1.0 else plain for group in groups]


def _rewarmed(step: int, steps_per_epoch: int, config: TrainConfig) -> float:
    since = step - config.freeze_epochs * steps_per_epoch
    warmup = max(int(config.warmup_epochs * steps_per_epoch), 1)
    return lr_factor(step, steps_per_epoch, config) * min(max(since + 1, 0) / warmup, 1.0)


def expected_input(info: DataInfo) -> dict:
    """What the model's input is made of, saved in every checkpoint so that evaluate,
    predict and export prepare inputs as training did."""
    return {"kind": info.kind, "inputs": info.inputs, "label": info.label, "task": info.task,
            "classes": info.classes, "input_shape": list(info.input_shape),
            "stats": info.stats, "model_input": info.model_input, "targets": info.targets,
            "decoded_images": info.decoded_images, "target_stats": info.target_stats}
