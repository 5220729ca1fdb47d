"""`train export RUN --format onnx|torchscript`: the run's best weights as a file that
runs without this toolkit, and beside it the preprocessing its input needs (JSON)."""

import json
import warnings
from pathlib import Path

import torch

from packer.errors import PackerError
from train.inputs import IMAGE_MEAN, IMAGE_STD
from train.trained import Trained

SUFFIX = {"onnx": ".onnx", "torchscript": ".torchscript.pt"}


def export(trained: Trained, fmt: str, out: Path) -> tuple[Path, Path]:
    """Write the model (OUT, or beside the checkpoint) and OUT's .preprocess.json."""
    out.parent.mkdir(parents=True, exist_ok=True)
    trained.model.cpu()
    example = torch.zeros(2, *trained.info.input_shape)
    if fmt == "onnx":
        _onnx(trained, example, out)
    else:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the deprecation of TorchScript, still supported
            torch.jit.trace(trained.model, example).save(str(out))
    recipe = out.with_name(out.name.removesuffix(SUFFIX[fmt]) + ".preprocess.json")
    recipe.write_text(json.dumps(preprocessing(trained), indent=1))
    return out, recipe


def _onnx(trained: Trained, example: torch.Tensor, out: Path) -> None:
    batch = torch.export.Dim("batch", min=1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the exporter's notes on its own internals
            torch.onnx.export(trained.model, (example,), str(out), input_names=["input"],
                              output_names=["output"], dynamic_shapes=({0: batch},),
                              dynamo=True, external_data=False, verbose=False)
    except Exception as err:  # the exporter fails in many exception types
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise PackerError(f"--format onnx: {trained.config.model} could not be exported "
                          f"({type(err).__name__}: {first}); try --format torchscript") from None


def preprocessing(trained: Trained) -> dict:
    """How to make the model's input, in words and numbers."""
    info = trained.info
    record = {"model": trained.config.model, "task": info.task, "classes": info.classes,
              "input": {"name": "input", "shape": ["batch", *info.input_shape],
                        "dtype": "float32"},
              "output": _output(trained)}
    if info.decoded_images:
        norm = info.model_input or {"mean": [IMAGE_MEAN] * 3, "std": [IMAGE_STD] * 3}
        height, width = info.input_shape[1:]
        record["steps"] = [
            "decode to RGB (channels first)",
            f"resize to {width}x{height} (width x height), bilinear, antialiased",
            "divide by 255", "subtract mean, divide by std (per channel)"]
        record.update(mean=norm["mean"], std=norm["std"], size=[height, width])
    elif info.kind == "image":
        norm = info.model_input or info.stats
        record["steps"] = ["pixels (H, W) uint8 as one channel", "divide by 255",
                           "subtract mean, divide by std",
                           f"resize to {list(info.input_shape[1:])}"]
        record.update(mean=norm["mean"], std=norm["std"], size=list(info.input_shape[1:]))
    else:
        record["steps"] = [f"the fields {', '.join(info.inputs)} as float32, concatenated",
                           "subtract mean, divide by std (per feature or channel)"]
        record.update(fields=info.inputs, mean=info.stats["mean"], std=info.stats["std"])
    return record


def _output(trained: Trained) -> str:
    task = trained.info.task
    if task == "classify":
        return "logits, one per class in the order of classes (softmax for probabilities)"
    if task == "multilabel":
        return "logits, one per label (sigmoid for probabilities)"
    return "the predicted values, in the targets' own units"


def default_path(trained: Trained, fmt: str) -> Path:
    return trained.path.with_name("model" + SUFFIX[fmt])
