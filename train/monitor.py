"""What chooses the best epoch and ends a run early (`--monitor`): one validation metric,
chosen from the data unless given, and the rule that only a better value of it counts
as progress (a lower loss at the same accuracy still updates best.pt, but does not keep
a run alive: accuracy 1.0 from epoch 9 with the loss still falling never stopped).

    auto               classification: the loss when the validation set holds under
                       SMALL_VALIDATION samples (its accuracy moves in steps of one
                       sample's share, and the epoch that got lucky would be kept),
                       else macro-F1 when the largest class has IMBALANCED times the
                       samples of the smallest (accuracy rewards ignoring a rare
                       class), else accuracy; regression: MAE; multi-label: mAP
    macro-f1           the mean F1 of the classes (or labels) the validation data holds
    balanced-accuracy  the mean recall of those classes
    map                multi-label: the mean average precision of those labels
"""

from packer.errors import PackerError
from train.config import TrainConfig
from train.data import DataInfo
from train.recipe import Choice

METRICS = ("auto", "accuracy", "macro-f1", "balanced-accuracy", "map", "loss", "mae")
IMBALANCED = 3.0
SMALL_VALIDATION = 100
_CLASSES_ONLY = ("accuracy", "macro-f1", "balanced-accuracy")


def choose(config: TrainConfig, info: DataInfo, val_samples: int) -> list[Choice]:
    """Set config.monitor from the data (and the `val_samples` that will score it) when
    it is auto; refuse one the task lacks."""
    if config.monitor != "auto":
        if info.task == "regress" and config.monitor in _CLASSES_ONLY:
            raise PackerError(f"--monitor {config.monitor} scores classes, and this is a "
                              "regression task: use --monitor mae or loss")
        if info.task != "regress" and config.monitor == "mae":
            raise PackerError(f"--monitor mae scores regression, and this is a {info.task} "
                              "task: use --monitor accuracy, macro-f1, balanced-accuracy or loss")
        if info.task == "multilabel" and config.monitor == "balanced-accuracy":
            raise PackerError("--monitor balanced-accuracy needs one class a sample: a "
                              "multi-label task is watched by map, macro-f1, accuracy or loss")
        if info.task != "multilabel" and config.monitor == "map":
            raise PackerError(f"--monitor map ranks the labels of a multi-label task, and "
                              f"this is a {info.task} task: use --monitor "
                              + ("mae or loss" if info.task == "regress" else
                                 "accuracy, macro-f1, balanced-accuracy or loss"))
        return []
    config.monitor, why = _from_data(info, val_samples)
    return [Choice("monitor", config.monitor, why)]


def _from_data(info: DataInfo, val_samples: int) -> tuple[str, str]:
    if info.task == "regress":
        return "mae", "regression: the mean absolute error, in the target's units"
    if info.task == "multilabel":
        return "map", ("multi-label: the mean average precision of the labels (element-wise "
                       "accuracy would reward predicting no label where labels are rare)")
    if info.task == "classify" and 0 < val_samples < SMALL_VALIDATION:
        return "loss", (f"a validation set of {val_samples:,} samples (under "
                        f"{SMALL_VALIDATION}): its accuracy moves in steps of "
                        f"{1 / val_samples:.0%}, so the epoch that got lucky would be kept; "
                        "the loss ranks the epochs finely")
    counts = [n for n in info.class_counts or [] if n > 0]
    if info.task == "classify" and counts and max(counts) >= IMBALANCED * min(counts):
        return "macro-f1", (f"the classes are imbalanced ({max(counts):,} against "
                            f"{min(counts):,} samples): accuracy would reward ignoring a "
                            "rare class")
    return "accuracy", "the classes are balanced"


def score(metric: str, val: dict | None, train: dict) -> tuple[str, float]:
    """(the name shown, its value as higher-is-better) of `metric` on the validation
    metrics, or the training loss where there is no validation."""
    if not val:
        return "train loss", -train["loss"]
    if "per_label" in val and metric in ("map", "macro-f1"):
        name, value = ("val mAP", val["map"]) if metric == "map" else ("val macro-F1",
                                                                       val["macro_f1"])
        return (name, value) if value is not None else ("val loss", -val["loss"])
    if metric == "loss" or metric not in ("accuracy", "mae") and "per_class" not in val:
        return "val loss", -val["loss"]
    if metric == "mae":
        return "val MAE", -val["mae"]
    if metric == "accuracy":
        return "val accuracy", val["accuracy"]
    held = [scores for scores in val["per_class"].values() if scores["recall"] is not None]
    if metric == "macro-f1":
        return "val macro-F1", sum(s["f1"] for s in held) / max(len(held), 1)
    return "val balanced accuracy", sum(s["recall"] for s in held) / max(len(held), 1)


def progressed(score_now: list, best: list | None) -> bool:
    """Whether the monitored value itself got better (what resets the patience)."""
    return best is None or score_now[0] > best[0]
