"""Unpacking: a packed dataset back to a folder in the layout it came from. Images
re-encoded when packed (--resize, --encode) are written as stored, with the extension
of their stored field (`a.png` packed with --encode jpeg comes back as `a.jpg`, raw
pixels as `a.rgb.npy`; of `a.png` and `a.tif`, packed apart, `a.tif` comes back as
`a.tif.png` beside `a.png`), and the result says so. A dataset split when packed comes
back in the split-folder layout that a folder of files is packed from
(`DEST/<split>/<class>/<file>`, every split's folder made, an empty one too), so that
packing DEST again gives the same splits; `splits=False` writes the samples without
them. Plain WebDataset shards (local or s3://) come back as their members, each a file
named as in the tar."""

import csv
import io
import json
import shutil
from pathlib import Path, PurePosixPath

import numpy as np
from tqdm import tqdm

from packer.errors import DatasetError, UsageProblem
from packer.manifest import layout_label, partial_path
from packer.packing.transform import reencoded_text
from packer.read.dataset import iter_samples, open_packed, open_parts, plain_shards
from packer.sample import DISAMBIGUATOR, KEY, field_bytes, restored_path
from packer.sources.binary.source import AUDIO_FIELD
from packer.sources.binary.wav import wav_bytes
from packer.sources.files.scan import SPLIT_FOLDERS, split_folders
from packer.storage.url import is_s3

MARKER_NAME = ".packer-unpack.json"  # written into every unpack output
SHARD_RUN = 256  # samples of a plain shard read at a time


def _safe_relative(path: str, key: str) -> str:
    parts = PurePosixPath(path).parts
    if not parts or path.startswith("/") or ".." in parts:
        raise DatasetError(f"sample {key!r}: its path {path!r} would leave the output folder")
    return path


def _labels_file_name(manifest: dict) -> str:
    """Where the labels go: the labels file's own place in a packed folder, else
    `labels.csv`."""
    source = manifest["source"]
    if source.get("labels_file"):
        labels_file, root = Path(source["labels_file"]).resolve(), Path(source["path"])
        if labels_file.is_relative_to(root):
            return labels_file.relative_to(root).as_posix()
    return "labels.csv"


def _free_name(folder: Path, name: str) -> str:
    """`name`, or `STEM-2.SUFFIX`, ... when an unpacked file already has it."""
    path, number = PurePosixPath(name), 1
    while (folder / name).exists():
        number += 1
        name = str(path.with_name(f"{path.stem}-{number}{path.suffix}"))
    return name


def _check_output(dataset, out: Path, overwrite: bool) -> None:
    if not is_s3(dataset):
        _check_apart(Path(dataset), out)
    if out.exists() and not out.is_dir():
        raise UsageProblem(f"-o {out} is a file; choose a folder")
    if not out.exists() or not any(out.iterdir()):
        return
    if not overwrite:
        raise UsageProblem(f"{out} exists and is not empty; pass --overwrite to replace it")
    if not (out / MARKER_NAME).is_file():
        raise UsageProblem(f"{out} exists and was not written by `packer unpack`; refusing "
                           "to replace it, choose another -o")


def _check_apart(dataset: Path, out: Path) -> None:
    if dataset.resolve().is_relative_to(out.resolve()):
        raise UsageProblem(f"-o {out} contains the dataset {dataset}; choose another output")
    if out.resolve().is_relative_to(dataset.resolve()):
        raise UsageProblem(f"-o {out} is inside the dataset {dataset}; unpacking there would "
                           "mix files into it: choose an output outside it")


class _Files:
    """Files written under `work`, their parent folders made once each."""

    def __init__(self, work: Path):
        self.work, self.made_dirs, self.count, self.bytes = work, {work}, 0, 0

    def write(self, rel: str, key: str, data: bytes) -> str:
        target = self.work / _safe_relative(rel, key)
        if target.exists():  # plain shards may repeat a name: never overwrite silently
            raise DatasetError(f"{rel}: two members of the dataset have this name (the "
                               f"second in sample {key!r}); unpacking would overwrite one "
                               "with the other")
        if target.parent not in self.made_dirs:
            target.parent.mkdir(parents=True, exist_ok=True)
            self.made_dirs.add(target.parent)
        target.write_bytes(data)
        self.count, self.bytes = self.count + 1, self.bytes + len(data)
        return rel


class SplitLayout:
    """Which folder each sample goes to: its split's (`train/`), where the dataset was
    split and the splits are written as folders (`names`, each with its count; "" for a
    dataset packed from split folders, whose keys begin with them), else the top;
    `note` says why a dataset's splits are not written as folders, or how to pack
    unlabelled ones back."""

    def __init__(self, manifest: dict, wanted: bool, dataset):
        splits = manifest.get("splits")
        self.names, self.note, self.prefixes, self.numbers = {}, None, [""], None
        if not splits:
            return
        sets = splits["sets"]
        if not wanted and splits["method"] == "folders":
            self.note = (f"--no-splits: the split folders {', '.join(sets)} are the first "
                         "folder of every key (the dataset was packed from them), and stay")
        elif not wanted:
            self.note = (f"--no-splits: the samples of the splits {', '.join(sets)} are "
                         "written together, as if packed without splits")
        elif not split_folders(list(sets)):
            self.note = (f"the splits {', '.join(sets)} are written together, not as "
                         f"folders: `packer pack` takes two or more top folders named "
                         f"{', '.join(SPLIT_FOLDERS)} for splits, and would take these "
                         "names for classes")
        else:
            self.names = {name: split["count"] for name, split in sets.items()}
            in_keys = splits["method"] == "folders"
            self.prefixes = ["" if in_keys else f"{name}/" for name in sets]
            self.numbers = _split_numbers(manifest, dataset)
            if layout_label(manifest) is None:
                self.note = ("the samples have no labels: pack the output again with "
                             "--unlabelled, or the folders below the split folders are "
                             "taken for classes (and the files beside them skipped)")

    def folder(self, index: int) -> str:
        """The folder of sample `index`, "" or ending in /."""
        return self.prefixes[self.numbers[index] if self.numbers is not None else 0]

    def make(self, work: Path) -> None:
        """Every split's folder, so that a split that holds no sample is packed again."""
        for name in self.names:
            (work / name).mkdir(exist_ok=True)


def _split_numbers(manifest: dict, dataset) -> np.ndarray:
    """The split of each sample, as its number in the manifest's splits. A sample in no
    split (a manifest that leaves gaps between its splits' ranges; a pack leaves none:
    --dedupe drops samples before they are split, and an append refuses a split dataset)
    stops the unpack."""
    numbers = np.full(manifest["count"], -1, np.int64)
    for number, split in enumerate(manifest["splits"]["sets"].values()):
        for first, stop in split["ranges"]:
            numbers[first:stop] = number
    outside = np.flatnonzero(numbers < 0)
    if outside.size:
        raise DatasetError(f"{dataset}: {outside.size:,} samples are in no split (sample "
                           f"{outside[0]:,} the first), but the manifest splits the others, "
                           "and a split-folder layout has no place for them. Pass --no-splits "
                           "to write every sample without its split")
    return numbers


def _write_samples(samples, manifest: dict, files: _Files, layout: SplitLayout,
                   progress: bool) -> list:
    """Every sample's files, in its split's folder; returns the labels rows."""
    label = layout_label(manifest)
    classes = manifest.get("classes") or []
    with_labels = manifest["source"]["labels"] != "folders"
    reencoded = "transform" in manifest
    label_rows = []
    sounds = manifest["source"].get("kind") == "binary-files"
    for index, sample in enumerate(tqdm(samples, total=manifest["count"], unit="sample",
                                        disable=not progress, desc="unpacking")):
        folder = layout.folder(index)
        paths = _write_sound(sample, files, folder) if sounds else []
        paths += [files.write(folder + _member_path(sample[KEY], field, reencoded),
                              sample[KEY], value if type(value) is bytes else field_bytes(value))
                  for field, value in sample.items() if field not in (KEY, label)]
        if with_labels and label in sample and paths:
            label_rows.append((paths[0], classes[sample[label]] if classes else sample[label]))
    return label_rows


SOUND_FIELD = "sample.npy"  # a chunked sound's samples (packer/sources/binary/chunks.py)


def _write_sound(sample: dict, files: _Files, folder: str) -> list[str]:
    """A sound packed from a WAV file (its samples and audio.json) written back as a WAV
    file in `folder`; its two fields are taken out of `sample`."""
    header = json.loads(field_bytes(sample.get(AUDIO_FIELD, b"null")) or b"null")
    if not header or header.get("container") != "riff" or SOUND_FIELD not in sample:
        return []
    values = np.load(io.BytesIO(field_bytes(sample.pop(SOUND_FIELD))), allow_pickle=False)
    del sample[AUDIO_FIELD]
    return [files.write(folder + restored_path(sample[KEY], "wav"), sample[KEY],
                        wav_bytes(values, header))]


def _member_path(key: str, field: str, reencoded: bool) -> str:
    """Where a sample's field is written back. One of several files of a stem packed as
    samples of their own (key `a/x~tif`), re-encoded into another field, keeps its
    source's name before the new extension (`a/x.tif.png`), apart from `a/x.png`."""
    source_field = key.partition(DISAMBIGUATOR)[2]
    if reencoded and source_field and field != source_field:
        return f"{restored_path(key, source_field)}.{field}"
    return restored_path(key, field)


def _write_shards(source, files: _Files, progress: bool) -> None:
    """Every member of plain shards, named as in the tar (`KEY.FIELD`)."""
    reader = source.reader()
    bar = tqdm(total=source.count, unit="sample", disable=not progress, desc="unpacking")
    try:
        for part, count in enumerate(source.part_counts):
            for start in range(0, count, SHARD_RUN):
                run = reader.read(part, start, min(SHARD_RUN, count - start))
                for sample in run:
                    key = sample[KEY]
                    for field, value in sample.items():
                        if field != KEY:
                            files.write(f"{key}.{field}" if field else key, key, value)
                bar.update(len(run))
    finally:
        reader.close()
        bar.close()


def _opened(dataset, cache_dir, cache_limit) -> tuple[dict | None, object]:
    """(manifest, None) of a packed dataset; (None, its parts) of plain shards."""
    if is_s3(dataset) or plain_shards(dataset):
        source = open_parts(dataset, cache_dir, cache_limit)
        return (None, source) if source.manifest is None else (source.manifest, None)
    return open_packed(dataset, cache_dir, cache_limit)[0], None


def unpack(dataset, out: Path, *, overwrite: bool = False, splits: bool = True,
           progress: bool = True, cache_dir=None, cache_limit=None) -> dict:
    """Write every sample's files to `out` (in its split's folder, where the pack made
    splits, unless `splits` is False), and the labels that no path carries to a labels
    file; returns counts. An s3:// dataset is read through the part cache (`cache_dir`,
    at most `cache_limit`)."""
    manifest, shards = _opened(dataset, cache_dir, cache_limit)
    layout = SplitLayout(manifest or {}, splits, dataset)
    _check_output(dataset, out, overwrite)
    work = partial_path(out)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    files, label_rows = _Files(work), []
    try:
        if shards is not None:
            _write_shards(shards, files, progress)
        else:
            layout.make(work)
            label_rows = _write_samples(iter_samples(dataset, cache_dir, cache_limit),
                                        manifest, files, layout, progress)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    labels_file = None
    if label_rows:
        labels_file = _free_name(work, _labels_file_name(manifest))
        with open(work / labels_file, "w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerows([("filename", "label"), *label_rows])
    named = dataset if is_s3(dataset) else str(Path(dataset).resolve())
    (work / MARKER_NAME).write_text(json.dumps({"dataset": named}))
    if out.exists():
        shutil.rmtree(out)
    work.rename(out)
    return {"output": str(out), "samples": shards.count if shards else manifest["count"],
            "files": files.count, "bytes": files.bytes, "labels_file": labels_file,
            "splits": layout.names or None, "splits_note": layout.note,
            "reencoded": reencoded_text(manifest) if manifest else None}
