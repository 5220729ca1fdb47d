"""`train fit`: defaults from the data, then per epoch a training pass, validation, a
checkpoint; at the end the best epoch's summary and plots."""

import json
import math
import sys
import time
import zlib

import torch
import torch.distributed as dist
from tqdm import tqdm

from packer.errors import PackerError
from train import checkpoint, damage, ema, finetune, monitor, plots, recipe, report
from train.cache import KEY
from train.config import TrainConfig
from train.inputs import to_inputs, to_targets
from train.metrics import Metrics, strict_json
from train.prepare import RESUME_INSTEAD, prepare
from train.run import Run, any_rank, build, deterministic
from train.step import (
    NonFiniteLoss,
    forward_loss,
    optimizer_step,
    set_seed,
    train_step,
    training_batch,
)


def train_epoch(run: Run, batches, epoch: int, generator: torch.Generator,
                steps: int, on_step=None) -> dict:
    """One pass; returns the mean loss, samples/s and the share of time spent waiting.
    `on_step(step of the epoch, loss)` is called after each step."""
    config = run.config
    finetune.train_mode(run)
    total_loss, samples, waited = 0.0, 0, 0.0
    share = Share()
    began = mark = time.perf_counter()
    bar = tqdm(batches, desc=f"epoch {epoch + 1}/{config.epochs}", total=steps,
               disable=not run.main or not sys.stderr.isatty(),  # no bars in log files
               leave=False, dynamic_ncols=True)
    for step, batch in enumerate(bar):
        waited += time.perf_counter() - mark
        share.add(batch)
        inputs = to_inputs(batch, run.info, run.device, config.channels_last)
        targets = to_targets(batch, run.info, run.device)
        try:
            loss = train_step(run, *training_batch(run, inputs, targets, generator),
                              step % config.accumulate, config.accumulate).item()
        except NonFiniteLoss:
            raise PackerError(_diverged(run, f"epoch {epoch + 1}, step {step + 1}: the "
                                             "training loss")) from None
        total_loss += loss * targets.shape[0]
        samples += targets.shape[0]
        if on_step is not None:
            on_step(step, loss)
        bar.set_postfix_str(f"loss {loss:.4f}", refresh=False)
        mark = time.perf_counter()
    if samples and (step + 1) % config.accumulate:
        optimizer_step(run)  # the epoch's last, shorter group of --accumulate batches
    seconds = time.perf_counter() - began
    sums = torch.tensor([total_loss, samples, waited, seconds], dtype=torch.float64)
    if run.world > 1:
        dist.all_reduce(sums)
    return {"loss": sums[0].item() / max(sums[1].item(), 1),
            "samples_per_s": sums[1].item() / max(sums[3].item() / run.world, 1e-9),
            "data_wait_share": sums[2].item() / max(sums[3].item(), 1e-9),
            "ranks": share.gathered(run.world)}


class Share:
    """What one rank trained on in an epoch: its samples, and the sum of their keys'
    CRC-32 (None for batches from the RAM cache, which keeps no keys), so that each
    rank's share can be checked against the loader's plan for (seed, epoch, rank)."""

    def __init__(self):
        self.samples, self.keys_crc32_sum, self.keyed = 0, 0, True

    def add(self, batch: dict) -> None:
        keys = batch.get(KEY)
        self.samples += len(keys) if keys is not None else len(next(iter(batch.values())))
        if keys is None:
            self.keyed = False
        else:
            self.keys_crc32_sum += sum(zlib.crc32(key.encode("utf-8", "surrogateescape"))
                                       for key in keys)

    def gathered(self, world: int) -> list[dict]:
        """Every rank's share, in rank order (the same list on every rank)."""
        mine = torch.tensor([self.samples, self.keys_crc32_sum, self.keyed], dtype=torch.int64)
        every = [torch.zeros_like(mine) for _ in range(world)]
        if world > 1:
            dist.all_gather(every, mine)
        else:
            every = [mine]
        return [{"samples": int(n), "keys_crc32_sum": int(crc) if keyed else None}
                for n, crc, keyed in (t.tolist() for t in every)]


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
def evaluate(run: Run, loader, model=None) -> dict:
    """The validation metrics of `model` (default: the run's weights)."""
    model = run.model if model is None else model
    model.eval()
    metrics = Metrics(run.info.task, run.info.classes, run.device)
    for batch in loader:
        inputs = to_inputs(batch, run.info, run.device, run.config.channels_last)
        targets = to_targets(batch, run.info, run.device)
        outputs, loss = forward_loss(run, inputs, targets, model)
        metrics.update(loss, outputs.unsqueeze(1) if outputs.ndim == 1 else outputs, targets)
    return metrics.result()


def _state(run: Run, epoch: int, best: list | None, best_epoch: int, stale: int) -> dict:
    model = run.model.module if run.world > 1 else run.model
    return {"model": model.state_dict(), "optimizer": run.optimizer.state_dict(),
            "scheduler": run.scheduler.state_dict(),
            "scaler": run.scaler.state_dict() if run.scaler else None, "epoch": epoch,
            "best": best, "best_epoch": best_epoch, "stale": stale,
            "config": run.config.to_dict(), "history": run.history,
            "data": finetune.expected_input(run.info), "ema": ema.state(run)}


def _restore(run: Run) -> tuple[int, list | None, int, int]:
    state = checkpoint.load(run.out / "last.pt", run.device, checkpoint.RESUME_KEYS,
                            RESUME_INSTEAD)
    model = run.model.module if run.world > 1 else run.model
    try:
        model.load_state_dict(state["model"])
        run.optimizer.load_state_dict(state["optimizer"])
    except (RuntimeError, ValueError, KeyError) as err:
        raise PackerError(_other_model_text(run, state, err)) from None
    run.scheduler.load_state_dict(state["scheduler"])
    if run.scaler and state["scaler"]:
        run.scaler.load_state_dict(state["scaler"])
    run.history = state["history"]
    ema.restore(run, state.get("ema"))
    return state["epoch"] + 1, state["best"], state["best_epoch"], state["stale"]


def _other_model_text(run: Run, state: dict, err: Exception) -> str:
    """Why a checkpoint does not fit the model this run builds: the options that differ."""
    then, now = state.get("config") or {}, run.config.to_dict()
    differ = [f"--{k.replace('_', '-')} {then[k]} then, {now[k]} now" for k in sorted(now)
              if k in then and then[k] != now[k] and k not in ("epochs", "resume", "out")]
    detail = "; ".join(differ[:5]) or str(err).strip().splitlines()[0]
    return (f"{run.out / 'last.pt'}: written for another model than this run builds "
            f"({detail}); resume with the options of that run, or train into a new --out")


def _step_logger(run: Run, writer, epoch: int, steps: int):
    """--log-every N: every Nth step's loss and learning rate (warm-up included), in
    metrics.jsonl (records with a `step`) and TensorBoard; None when off."""
    every = run.config.log_every
    if not every or not run.main:
        return None

    def logged(step: int, loss: float) -> None:
        number = epoch * steps + step + 1  # steps since the run began
        if number % every == 0:
            record = {"step": number, "epoch": epoch + 1, "loss": loss,
                      "lr": run.optimizer.param_groups[0]["lr"]}
            with open(run.out / "metrics.jsonl", "a", encoding="utf-8") as file:
                file.write(json.dumps(strict_json(record), allow_nan=False) + "\n")
            if writer is not None:
                writer.add_scalar("step/loss", loss, number)
                writer.add_scalar("step/lr", record["lr"], number)

    return logged


def _log(run: Run, writer, record: dict) -> None:
    with open(run.out / "metrics.jsonl", "a", encoding="utf-8") as file:
        file.write(json.dumps(strict_json(record), allow_nan=False) + "\n")
    if writer is None:
        return
    for side in ("train", "val", "val_ema"):
        for name, value in (record.get(side) or {}).items():
            if isinstance(value, int | float):
                writer.add_scalar(f"{side}/{name}", value, record["epoch"])
    writer.add_scalar("lr", record["lr"], record["epoch"])
    _log_classes(writer, record.get("val") or {}, record["epoch"])


def _log_classes(writer, val: dict, epoch: int) -> None:
    """Per class (or label) precision, recall and F1 as scalars, and the confusion matrix
    as a table, in TensorBoard."""
    for kind in ("per_class", "per_label"):
        for name, scores in (val.get(kind) or {}).items():
            for metric in ("precision", "recall", "f1", "ap"):
                if scores.get(metric) is not None:
                    writer.add_scalar(f"val_{kind}/{name}/{metric}", scores[metric], epoch)
    if "confusion" in val:
        names = list(val["per_class"])
        rows = ["| true \\ predicted | " + " | ".join(names) + " |",
                "|" + " --- |" * (len(names) + 1)]
        rows += [f"| {name} | " + " | ".join(map(str, row)) + " |"
                 for name, row in zip(names, val["confusion"], strict=True)]
        writer.add_text("val/confusion", "\n".join(rows), epoch)


def fit(config: TrainConfig) -> dict:
    """Train; returns the summary written to OUT/summary.json."""
    with damage.DamageLog() as damaged, deterministic(config.deterministic):
        return _fit(config, damaged)


def _fit(config: TrainConfig, damaged: damage.DamageLog) -> dict:
    config, data = prepare(config, damaged)
    run = build(config, math.ceil(data.steps / config.accumulate), data.info)
    if run.main:
        imbalanced = recipe.imbalance_warning(data.info, config)
        print("\n".join([recipe.report(data.choices), *run.notes,
                         *([f"WARNING: {imbalanced}"] if imbalanced else [])]), flush=True)
        run.out.mkdir(parents=True, exist_ok=True)
    start, best, best_epoch, stale = 0, None, -1, 0
    if config.resume:
        start, best, best_epoch, stale = _restore(run)
        if data.cache is not None and start > 0:
            for _ in data.epoch(0, set_seed(config.seed, 0)):
                pass  # the cache holds the first epoch's samples, in its order
    elif run.main:
        (run.out / "metrics.jsonl").unlink(missing_ok=True)
    writer = _tensorboard(run)
    damaged.taken(run.world)  # what the range test read: the first epoch reads it again
    began, run.stopped_by = time.monotonic(), None
    for epoch in range(start, config.epochs):
        generator = set_seed(config.seed, epoch)  # dropout too: the same after a resume
        phase = finetune.enter_epoch(run, epoch, first=epoch == start)
        if phase and run.main:
            print(phase, flush=True)
        train = train_epoch(run, data.epoch(epoch, generator), epoch, generator, data.steps,
                            _step_logger(run, writer, epoch, data.steps))
        val = evaluate(run, data.val()) if data.val_loader else None
        val_ema = evaluate(run, data.val(), run.ema.module) if run.ema and val else None
        broken = _broken(run, val)
        if broken:
            raise PackerError(_diverged(run, f"epoch {epoch + 1}: {broken}"))
        if isinstance(run.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            run.scheduler.step((val or train)["loss"])
        watched, value = monitor.score(config.monitor, val, train)
        score = [value, -(val or train)["loss"]]
        improved = best is None or score > best  # ties go to the lower loss: best.pt
        stale = 0 if monitor.progressed(score, best) else stale + 1  # ties are no progress
        best, best_epoch = (score, epoch) if improved else (best, best_epoch)
        record = {"epoch": epoch + 1, "lr": run.optimizer.param_groups[0]["lr"],
                  "train": train, "val": val, "monitor": {"name": watched, "value": abs(value)},
                  "damaged_samples": damaged.taken(run.world)}
        if val_ema is not None:
            record["val_ema"] = val_ema
            record["monitor"]["ema"] = abs(monitor.score(config.monitor, val_ema, train)[1])
        run.history.append({"epoch": epoch + 1, "score": score[0]})
        if run.main:
            _log(run, writer, record)
            state = _state(run, epoch, best, best_epoch, stale)
            checkpoint.save(run.out / "last.pt", state)
            if improved:
                checkpoint.save(run.out / "best.pt", state)
            if run.ema is not None and _best_ema(run, val_ema, train):
                checkpoint.save(run.out / "best_ema.pt", {**state, "model": ema.weights(run)})
            print(_epoch_line(record), flush=True)
            if damage.summary(record["damaged_samples"]):
                print(damage.summary(record["damaged_samples"]), flush=True)
        run.stopped_by = _stop(config, epoch, stale, began)
        if run.stopped_by:
            break
    return _finish(run, writer, best_epoch, data.choices)


def _stop(config: TrainConfig, epoch: int, stale: int, began: float) -> str | None:
    """What ends the run after this epoch, before its last: patience, or the time limit
    (every rank stops together)."""
    if epoch + 1 >= config.epochs:
        return None
    if config.patience is not None and \
            finetune.stale_since_unfrozen(config, epoch, stale) >= config.patience:
        return "patience"
    if config.time_limit and any_rank(time.monotonic() - began >= 60 * config.time_limit):
        return "time limit"
    return None


def _best_ema(run: Run, val: dict | None, train: dict) -> bool:
    """Whether the average's score this epoch is its best yet (each epoch's, without
    validation): kept in the run's history."""
    score = [monitor.score(run.config.monitor, val, train)[1], -(val or train)["loss"]]
    best = max((h["ema"] for h in run.history[:-1] if "ema" in h), default=None)
    run.history[-1]["ema"] = score
    return val is None or best is None or score > best


def _tensorboard(run: Run):
    if not run.main:
        return None
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(str(run.out / "tensorboard"))


def _epoch_line(record: dict) -> str:
    train, val = record["train"], record["val"] or {}
    parts = [f"epoch {record['epoch']}", f"loss {train['loss']:.4f}"]
    parts += [f"val {k} {val[k]:.4f}" for k in ("loss", "accuracy", "mae", "rmse") if k in val]
    watched = record.get("monitor") or {}
    if watched.get("name", "").endswith(("macro-F1", "balanced accuracy", "mAP")):
        parts.append(f"{watched['name']} {watched['value']:.4f}")
    if "ema" in watched:
        parts.append(f"EMA {watched['name']} {watched['ema']:.4f}")
    if "mae_per_target" in val:
        parts.append("val mae per target " + " ".join(f"{v:.4f}" for v in val["mae_per_target"]))
    parts += [f"{train['samples_per_s']:,.0f} samples/s",
              f"waiting for data {100 * train['data_wait_share']:.0f}%"]
    return ", ".join(parts)


def _finish(run: Run, writer, best_epoch: int, choices: list) -> dict:
    lines = [record for record in map(json.loads, (run.out / "metrics.jsonl").read_text()
                                      .splitlines()) if "step" not in record] if run.main else []
    best = next((r for r in lines if r["epoch"] == best_epoch + 1), lines[-1] if lines else {})
    epochs = max(len(lines), 1)
    summary = {"best_epoch": best_epoch + 1, "best": best, "epochs_run": len(lines),
               "epochs_planned": run.config.epochs,
               "stopped_early": run.stopped_by == "patience", "stopped_by": run.stopped_by,
               "monitor": monitor.score(run.config.monitor, best.get("val"),
                                        best.get("train", {}))[0] if best else None,
               "chosen": {c.name: {"value": c.value, "why": c.why} for c in choices},
               "samples_per_s": sum(r["train"]["samples_per_s"] for r in lines) / epochs,
               "data_wait_share": sum(r["train"]["data_wait_share"] for r in lines) / epochs}
    if run.main:
        summary["plots"] = plots.after_fit(run.out, lines, best_epoch + 1, run.info.classes)
        (run.out / "summary.json").write_text(json.dumps(strict_json(summary), indent=1,
                                                         allow_nan=False))
        print(_report(run), flush=True)
        print(_closing_line(run, summary), flush=True)
        writer.close()
    if run.world > 1:
        dist.barrier()
    return summary


def _report(run: Run) -> str:
    """OUT/report.html; a run whose page cannot be made (a dataset moved away since it
    started) is still a finished run, so that is said, not raised."""
    try:
        return f"report: {report.write(run.out, workers=run.config.workers)}"
    except PackerError as err:
        return f"report not written: {err}"


def _closing_line(run: Run, summary: dict) -> str:
    name = summary["monitor"] or "score"
    value = (summary["best"].get("monitor") or {}).get("value")
    shown = f"{value:.4f}" if isinstance(value, float) else "-"
    early = {"patience": " (stopped early)", "time limit": " (stopped at the time limit, "
             f"{run.config.time_limit:g} min)"}.get(summary["stopped_by"], "")
    return (f"best epoch {summary['best_epoch']} of {summary['epochs_run']}{early}: {name} "
            f"{shown}; weights in {run.out / 'best.pt'}, plots in {run.out}")
