"""Training on several packed datasets at once: `train fit A B --mix-weights 0.7,0.3`.

The training data is then packer's mix of them (packer.read.mix): each epoch draws from
the datasets in the proportions given (by default in proportion to their sizes: each
sample once an epoch), classes matched by name. --val-split holds out the same fraction
of each dataset, and validation reads every held-out sample once."""

from dataclasses import replace

import click

from packer.errors import PackerError


def from_command_line(data: tuple[str, ...], mix_weights: str | None) -> dict:
    """TrainConfig's data, mix and mix_weights from DATA... and --mix-weights."""
    if len(data) == 1:
        if mix_weights is not None:
            raise click.BadParameter(f"{mix_weights} gives the proportions of several datasets, "
                                     "but one DATA is named: name them all (train fit A B "
                                     f"--mix-weights {mix_weights})", param_hint="--mix-weights")
        return {"data": data[0]}
    if mix_weights is None:
        return {"data": data[0], "mix": list(data)}
    proportions = _numbers(mix_weights)
    if proportions is None or len(proportions) != len(data) or min(proportions) <= 0:
        raise click.BadParameter(f"{mix_weights}: give one positive proportion per dataset "
                                 f"({len(data)} named), e.g. --mix-weights "
                                 f"{','.join(['1'] * len(data))}", param_hint="--mix-weights")
    return {"data": data[0], "mix": list(data), "mix_weights": proportions}


def _numbers(text: str) -> list[float] | None:
    try:
        return [float(part) for part in text.split(",")]
    except ValueError:
        return None


def source(config, every_sample: bool = False) -> dict:
    """open_dataset's path (and weights) of the training data: DATA, or the mix of the
    datasets; with `every_sample` (validation) each of their samples once."""
    if not config.mix:
        return {"path": config.data}
    weights = "sizes" if every_sample or not config.mix_weights else config.mix_weights
    return {"path": list(config.mix), "weights": weights}


def merged(infos: list, config):
    """What a mix of datasets is, from what each is (train.data.DataInfo): the first's,
    with classes matched by name (the first's, then names new in later ones) and their
    counts added up; images under `image` where datasets name them differently (as the
    loader gives them then). Datasets of other kinds or labels are refused."""
    first, classes, counts = infos[0], [], {}
    for info, path in zip(infos, config.mix, strict=True):
        if (info.kind, info.label, info.task) != (first.kind, first.label, first.task) or (
                info.input_shape != first.input_shape or
                (not first.decoded_images and info.inputs != first.inputs)):
            raise PackerError(f"{path}: its samples hold {info.kind} {list(info.input_shape)} "
                              f"({', '.join(info.inputs)}) with label {info.label}, those of "
                              f"{config.mix[0]} {first.kind} {list(first.input_shape)} "
                              f"({', '.join(first.inputs)}) with label {first.label}: a mix "
                              "needs datasets of the same kind")
        classes += [name for name in info.classes or [] if name not in classes]
        for name, count in zip(info.classes or [], info.class_counts or [], strict=False):
            counts[name] = counts.get(name, 0) + count
    if config.num_classes is not None and classes and config.num_classes != len(classes):
        raise PackerError(f"--num-classes {config.num_classes}, but the datasets have "
                          f"{len(classes)} classes between them: {', '.join(classes[:10])}")
    same_key = len({info.inputs[0] for info in infos}) == 1
    return replace(first, classes=classes or None,
                   class_counts=[counts.get(name, 0) for name in classes]
                   if all(info.class_counts for info in infos) else None,
                   inputs=first.inputs if same_key or not first.decoded_images else ["image"],
                   stats=None if len(infos) > 1 and first.kind != "image" else first.stats)
