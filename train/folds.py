"""k-fold cross-validation (`train fit DATA --folds K`): a run per fold, each validating
on one fold of DATA and training on the others (the folds stratified by class, drawn
from --seed: train.sides.fold_held), in OUT/fold-1 ... OUT/fold-K; each fold's best
score, their mean and spread printed and written to OUT/folds.json. `--resume` keeps the
folds that finished and continues the one that stopped."""

import json
import statistics
from dataclasses import replace
from pathlib import Path

from packer.errors import PackerError
from train.config import TrainConfig
from train.loop import fit
from train.run import setup_distributed

FOLDS_NAME = "folds.json"


def cross_validate(config: TrainConfig) -> dict:
    """Run every fold; returns what OUT/folds.json holds."""
    _refuse(config)
    summaries = [_fold(config, fold) for fold in range(config.folds)]
    result = _result(config, summaries)
    if setup_distributed(config.device)[0] == 0:
        Path(config.out, FOLDS_NAME).write_text(json.dumps(result, indent=1))
        print(text(result, config.out), flush=True)
    return result


def _refuse(config: TrainConfig) -> None:
    given = ("--val", config.val) if config.val is not None else (
        "--val-split", config.val_split) if config.val_split is not None else (
        "--val-split-name", config.val_split_name) if config.val_split_name else (
        "a mix of datasets", config.mix) if config.mix else None
    if given:
        raise PackerError(f"--folds {config.folds} validates on each fold of DATA in turn; "
                          f"{given[0]} chooses other validation samples: leave out one of them")


def _fold(config: TrainConfig, fold: int) -> dict:
    out = Path(config.out) / f"fold-{fold + 1}"
    if config.resume and (out / "summary.json").is_file():
        return json.loads((out / "summary.json").read_text())
    print(f"fold {fold + 1} of {config.folds}: validating on that fold of {config.data}, "
          f"training on the others ({out})", flush=True)
    return fit(replace(config, out=str(out), fold=fold,
                       resume=config.resume and (out / "last.pt").is_file()))


def _result(config: TrainConfig, summaries: list[dict]) -> dict:
    scores = [(s["best"].get("monitor") or {}).get("value") for s in summaries]
    if any(score is None for score in scores):
        raise PackerError(f"--folds {config.folds}: a fold's run has no validation score; "
                          f"see {config.out}/fold-N/summary.json")
    return {"folds": config.folds, "monitor": summaries[0]["monitor"], "scores": scores,
            "mean": statistics.fmean(scores), "std": statistics.stdev(scores),
            "best_epochs": [s["best_epoch"] for s in summaries],
            "epochs_run": [s["epochs_run"] for s in summaries],
            "runs": [str(Path(config.out) / f"fold-{k + 1}") for k in range(config.folds)]}


def text(result: dict, out: str) -> str:
    """The lines printed at the end: each fold's score, their mean and spread."""
    lines = [f"{result['folds']}-fold cross-validation, {result['monitor']} of each fold's "
             "best epoch:"]
    lines += [f"  fold {k + 1}: {score:.4f} (epoch {epoch} of {run})" for k, (score, epoch, run)
              in enumerate(zip(result["scores"], result["best_epochs"], result["epochs_run"],
                               strict=True))]
    lines.append(f"  mean {result['mean']:.4f}, spread (standard deviation) "
                 f"{result['std']:.4f}")
    lines.append(f"runs in {out}/fold-1 ... fold-{result['folds']}; figures in "
                 f"{out}/{FOLDS_NAME}")
    return "\n".join(lines)
