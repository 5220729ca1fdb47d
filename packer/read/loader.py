"""The streaming loader: any packed dataset as a PyTorch IterableDataset.

    ds = packer.open_dataset("images-wds", shuffle=True, seed=0, image_size=64)
    loader = packer.DataLoader(ds, batch_size=64, num_workers=4, pin_memory=True)
    for epoch in range(10):
        ds.set_epoch(epoch)
        for batch in loader: ...
    state = ds.state_dict()      # resume mid-epoch: ds.load_state_dict(state)

Each worker of each rank reads the part of the epoch that `packer.read.plan` gives it,
in windows of contiguous samples, and decodes in the worker. Reading handles are
opened lazily in the process that reads, never inherited across fork, so `spawn`
works as well as `fork`.
"""

import copy
import warnings
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import torch
import torch.distributed as dist
from torch.utils.data import IterableDataset, get_worker_info

from packer.errors import DatasetError
from packer.manifest import split_ranges
from packer.read import lean, mix, plan, streams
from packer.read.collate import batches, collate_samples, collate_with_pixels, slot_buffer
from packer.read.dataset import PackedParts, open_parts
from packer.read.decode import Decoder, image_field, is_image_field, preload
from packer.read.elastic import Order
from packer.read.forking import freeze_inherited_objects
from packer.read.handover import GROUP, handed_over
from packer.read.progress import EpochProgress
from packer.sample import KEY
from packer.text import without_addresses

ON_ERROR = ("warn", "skip", "raise")


class PackedDataset(EpochProgress, IterableDataset):
    """Every sample exactly once per epoch across workers and ranks (plus padding),
    the same count on every rank, in an order fixed by (seed, epoch). `holdout=(0.1,
    "val")` reads only a fixed tenth of the dataset (whole units spread evenly over
    it), `(0.1, "train")` the rest: a validation split without a second dataset. `order`:
    the epoch's sequence of units (packer.read.elastic.Order of `source`, or of several
    datasets: packer.read.mix). `split="val"` reads only the samples of a split the pack
    made (the manifest's `splits`)."""

    def __init__(self, source: PackedParts, *, shuffle: bool = False, seed: int = 0,
                 decode: str = "rgb8", image_size=None, transform=None, decoders=None,
                 rank: int | None = None, world_size: int | None = None,
                 remainder: str = "pad", on_error: str = "warn", shuffle_buffer: int = 1024,
                 unit: int = 64, holdout: tuple[float, str] | None = None,
                 exact_resize: bool = False, threads: int = 0, order=None,
                 split: str | None = None, streams: int | None = None):
        if threads < 0:
            raise ValueError(f"threads={threads}: give 0 (decode in the reading process or "
                             "worker) or the number of decoding threads")
        if remainder not in plan.REMAINDERS:
            raise ValueError(f"remainder={remainder!r}: use 'pad' or 'drop'")
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error={on_error!r}: use one of {', '.join(ON_ERROR)}")
        if shuffle_buffer < 1 or unit < 1 or (streams is not None and streams < 1):
            raise ValueError("shuffle_buffer, unit and streams must be at least 1")
        if holdout is not None and not (0 < holdout[0] < 1 and holdout[1] in ("train", "val")):
            raise ValueError(f"holdout={holdout!r}: give (fraction between 0 and 1, "
                             "'train' or 'val')")
        distributed = dist.is_available() and dist.is_initialized()
        self.world_size = world_size or (dist.get_world_size() if distributed else 1)
        self.rank = rank if rank is not None else (dist.get_rank() if distributed else 0)
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} is outside world_size {self.world_size}")
        self.source, self.shuffle, self.seed = source, shuffle, seed
        self.image_field = image_field(source)
        self.decoder = Decoder(decode, image_size, decoders,
                               image_key=self.image_field if self.image_field == "image" else None,
                               exact_resize=exact_resize)
        preload(decode, source.field_counts()[0])
        # Samples decoded to tensors are batched: one without the image cannot be
        self.required_image = (("image" if self.image_field == "image" else self.image_field)
                               if decode == "rgb8" else None)
        self.transform, self.threads, self.streams = transform, threads, streams
        self.remainder, self.on_error = remainder, on_error
        self.window, self.unit = shuffle_buffer, unit if source.seekable else None
        self.holdout = holdout
        ranges = None if split is None else split_ranges(source.manifest, split, source.path)
        if holdout and self.unit:  # units small enough that the held-out side gets 16 or more
            self.unit = max(1, min(self.unit, int(source.count * holdout[0] / 16)))
        self.order = order or Order(source.part_counts, self.unit, shuffle, seed, holdout,
                                    ranges, split)
        self.total = self.order.total
        # In shared memory, so that persistent workers see the epoch set_epoch gives
        self._epoch = torch.zeros(1, dtype=torch.int64).share_memory_()
        self.errors = 0  # samples that failed to read or decode (in this process)
        self._resume: dict | None = None
        self._emitted = 0  # samples yielded in this process this epoch (num_workers=0)
        self._consumed_batches = None  # (batches, batch_size, workers, drop_last): consumed()
        self._delivered: list[int] | None = None  # positions of each worker's: delivered()
        self._batching: tuple[int, bool] | None = None  # (batch_size, drop_last): batch_as()

    @property
    def classes(self) -> list[str] | None:
        return self.source.classes

    @property
    def epoch(self) -> int:
        return int(self._epoch[0])

    @epoch.setter
    def epoch(self, value: int) -> None:
        self._epoch[0] = value

    def set_epoch(self, epoch: int) -> None:
        if self._resume and self._resume["epoch"] != epoch:
            self._resume = None
        self.epoch, self._emitted, self._consumed_batches = epoch, 0, None
        self._delivered = None

    def batch_as(self, batching: tuple[int, bool] | None) -> None:
        """packer.DataLoader's (batch_size, drop_last) for the workers it starts now, which
        then yield whole batches; None: samples again."""
        self._batching = batching

    def __iter__(self):
        """This process's samples; or, read through `packer.DataLoader`, its batches."""
        info, batching = get_worker_info(), self._batching
        arrays = bool(batching) and self._pixels_as_arrays()
        holes = bool(batching) and self.on_error == "skip"  # see batches()
        layout = self._batch_layout(arrays) if batching else None
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        mine, cut = streams.of_worker(worker, workers, self.streams), self.plan_workers(workers)
        first = self.first_stream(cut, batching[0] if batching else 1)
        freeze_inherited_objects()
        self._emitted = 0
        collate = (partial(collate_with_pixels, field=self.required_image, collate=collate_samples)
                   if arrays else collate_samples)
        if layout:
            decoded = partial(self._decoded_batch, decoder=self._worker_decoder(arrays),
                              collate=collate)
            made = {stream: self._laid_out_batches(stream, cut, layout, batching, decoded,
                                                   info is None) for stream in mine}
            return handed_over(streams.in_rounds(made, first), info is not None, GROUP)
        made = {stream: self.iter_worker(stream, cut, arrays, holes) for stream in mine}
        if batching is None:
            samples = (sample for _, sample in streams.in_rounds(made, first))
            return self._counted(samples) if info is None else samples
        made = {stream: batches(samples, *batching, collate) for stream, samples in made.items()}
        return handed_over(streams.in_rounds(made, first), info is not None, 1)

    def _laid_out_batches(self, worker: int, workers: int, layout: lean.Layout,
                          batching: tuple[int, bool], decoded, counted: bool):
        """The worker's batches, with the positions each covers, each made as `layout` says
        from the pieces of the windows it takes its samples from (lean.window_batches),
        or by `decoded(samples, pool=)` where the layout does not fit them (decoded in
        `threads` threads if asked). The reader closes after the last batch is made: the
        layout's field `in_place` may lie in its memory map until then; other windows a
        worker reads into its slots."""
        runs, in_place = self._runs(worker, workers), layout.in_place
        reader = self.source.reader(runs)
        pool = ThreadPoolExecutor(self.threads, "packer-decode") if self.threads > 1 else None
        collate = partial(lean.pieces_batch, layout=layout, decoded=partial(decoded, pool=pool))
        try:
            windows = plan.read_windows(reader, runs, self.window, self._order(worker),
                                        self._skip(worker, workers), in_place, True,
                                        slot_buffer if not (counted or in_place) else None)
            for made, size in lean.window_batches(windows, *batching, collate):
                self._emitted += size if counted else 0
                yield made, size
        finally:
            reader.close()
            if pool is not None:
                pool.shutdown(cancel_futures=True)

    def _batch_layout(self, arrays: bool) -> lean.Layout | None:
        """How batches are made from the samples as read, where decoding would change
        nothing (packer.read.lean); None where it would."""
        decoder = self.decoder
        if self.transform is not None or decoder.decoders or decoder.image_key:
            return None
        return lean.layout(*self.source.field_counts(), decoder.mode, decoder.size, arrays)

    def _decoded_batch(self, samples: list[dict], decoder: Decoder, collate, pool=None):
        """A batch the lean layout does not fit, decoded sample by sample, by `pool`'s
        threads if given (on_error as usual; with "warn", failures are replaced within
        the batch)."""
        decoded = ([self._decode(sample, decoder) for sample in samples] if pool is None else
                   list(self._decode_in_threads(samples, range(len(samples)), decoder, pool)))
        good = [sample for sample in decoded if sample is not None]
        if self.on_error == "warn" and len(good) < len(decoded):
            stand_in = good[0] if good else self._stand_in(decoder)
            good = [stand_in if sample is None else sample for sample in decoded]
        return collate(good) if good else None

    def _counted(self, samples):
        """`samples`, counted as they pass (skipped ones too: they are None here)."""
        for sample in samples:
            self._emitted += 1
            yield sample

    def _pixels_as_arrays(self) -> bool:
        """Whether images go into batches as (H, W, 3) arrays, each copied once into the
        batch's buffer (stored pixels straight from the bytes read): images decoded to
        rgb8 that no transform or decoder of the user's sees."""
        return (self.required_image is not None and self.transform is None
                and not any(is_image_field(name) for name in self.decoder.decoders))

    def iter_worker(self, worker: int, num_workers: int, arrays: bool = False,
                    holes: bool = False):
        """The samples `worker` of `num_workers` yields this epoch, decoded (stored
        pixels as (H, W, 3) arrays with `arrays`; a None in place of each sample skipped
        with on_error="skip" if `holes`)."""
        decoder = self._worker_decoder(arrays)
        last_good, owed = None, 0  # owed: failures to replace with the next good sample
        for sample in self._decoded(worker, num_workers, decoder):
            if sample is None and self.on_error == "warn" and last_good is not None:
                yield last_good
            elif sample is None:
                owed += self.on_error == "warn"
                if holes:
                    yield None
            else:
                last_good = sample
                for _ in range(1 + owed):
                    yield sample
                owed = 0
        if owed:  # every sample of this worker failed: its count still holds
            stand_in = self._stand_in(decoder)
            for _ in range(owed):
                yield stand_in

    def _worker_decoder(self, arrays: bool) -> Decoder:
        if not arrays:
            return self.decoder
        decoder = copy.copy(self.decoder)
        decoder.arrays = True
        return decoder

    def _stand_in(self, decoder: Decoder) -> dict:
        """The dataset's first sample that decodes, to stand in for the failures of a
        worker none of whose samples did (so that ranks still yield the same count)."""
        reader = self.source.reader()
        try:
            for part, count in enumerate(self.source.part_counts):
                for start in range(0, count, 64):
                    for raw in reader.read(part, start, min(64, count - start)):
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore")
                            sample = self._decode(raw, decoder)
                        if sample is not None:
                            return sample
        finally:
            reader.close()
        raise DatasetError(f"{self.source.path}: no sample decodes ({self.errors:,} failed in "
                           "this worker, and none of the dataset's could stand in for them); "
                           "`packer verify` and the warnings above tell why")

    def _decoded(self, worker: int, num_workers: int, decoder: Decoder):
        """The worker's samples in their order, each decoded or None where it failed."""
        runs = self._runs(worker, num_workers)
        reader = self.source.reader(runs)
        try:
            yield from self._read(reader, runs, worker, num_workers, decoder)
        finally:
            reader.close()

    def _read(self, reader, runs: list[plan.Segment], worker: int, num_workers: int,
              decoder: Decoder):
        """The samples of `runs` in their order, each decoded or None where it failed:
        read in windows of contiguous runs, decoded in `threads` threads if asked."""
        pool = ThreadPoolExecutor(self.threads, "packer-decode") if self.threads > 1 else None
        try:
            for raw, indices in plan.read_windows(reader, runs, self.window,
                                                  self._order(worker),
                                                  self._skip(worker, num_workers)):
                if pool is None:
                    yield from (self._decode(raw[index], decoder) for index in indices)
                else:
                    yield from self._decode_in_threads(raw, indices, decoder, pool)
        finally:
            if pool is not None:
                pool.shutdown(cancel_futures=True)

    def _order(self, worker: int):
        """The order of each window's samples (plan.window_order) for `worker`."""
        return partial(plan.window_order, shuffle=self.shuffle, seed=self.seed,
                       epoch=self.epoch, rank=self.rank, worker=worker)

    def _decode_in_threads(self, raw: list[dict], indices, decoder: Decoder, pool):
        """The samples at `indices` decoded by the pool's threads, in that order (a few
        runs of samples per thread: one task per sample would cost more than a small
        image's decode)."""
        step = max(1, -(-len(indices) // (4 * self.threads)))
        runs = [indices[begin:begin + step] for begin in range(0, len(indices), step)]
        for decoded in pool.map(lambda run: [self._decode(raw[i], decoder) for i in run], runs):
            yield from decoded

    def _decode(self, raw: dict, decoder: Decoder) -> dict | None:
        """The decoded sample, or None (with a warning) when it fails to decode.
        With on_error="warn" the caller puts another sample in its place, so that
        every rank still yields the same count."""
        try:
            sample = decoder(raw)
            if self.required_image and self.required_image not in sample:
                raise LookupError(f"no {self.required_image} field to decode (its fields: "
                                  f"{', '.join(n for n in sample if n != KEY)})")
            return self.transform(sample) if self.transform else sample
        except Exception as err:  # any decoder or transform failure is one bad sample
            if self.on_error == "raise":
                err.add_note(f"packer: in sample {raw.get(KEY)!r} of {self.source.path}")
                raise
            self.errors += 1
            action = "replaced by another sample" if self.on_error == "warn" else "skipped"
            reason = without_addresses(str(err))  # the same text for the same sample
            warnings.warn(f"packer: sample {raw.get(KEY)!r} of {self.source.path} failed "
                          f"({type(err).__name__}: {reason}); {action} ({self.errors} so far "
                          "in this worker)", stacklevel=2)
            return None


def open_dataset(path, *, shuffle: bool = False, seed: int = 0, decode: str = "rgb8",
                 image_size=None, transform=None, decoders=None, rank: int | None = None,
                 world_size: int | None = None, remainder: str = "pad", on_error: str = "warn",
                 shuffle_buffer: int = 1024, unit: int = 64, holdout=None,
                 exact_resize: bool = False, threads: int = 0, cache_dir=None,
                 cache_limit=None, weights=None, samples: int | None = None,
                 split: str | None = None, streams: int | None = None) -> PackedDataset:
    """Open a packed dataset (any format `packer pack` writes) or plain WebDataset
    shards (a folder, `shard-{000000..000009}.tar`, http(s)://, pipe:, s3://) for training.

    shuffle, seed    shard/part order and a bounded buffer, fixed by (seed, epoch)
    decode           "rgb8" (uint8 (3, H, W) tensors), "pil", or "raw" (bytes)
    image_size       resize images to this (int: a square, or (height, width)); a JPEG
                     twice as large or more is decoded at a reduced scale first, unless
                     exact_resize=True (README: how far the two differ)
    transform        a function of the decoded sample; decoders: {field: function}
    rank, world_size this process's share (default: from torch.distributed)
    remainder        "pad" (every rank the same count, wrapping) or "drop"
    on_error         a sample that fails to decode: "warn" (replaced), "skip" (its batch
                     is shorter), "raise"
    shuffle_buffer   samples read and shuffled together; unit: samples per unit of order
    holdout          (fraction, "train" or "val"): one side of a fixed split
    threads          decode in this many threads of the reading process (with
                     num_workers=0: no worker processes; README: when that wins)
    cache_dir        where parts of an s3:// dataset are kept (default ~/.cache/packer),
    cache_limit      at most this many bytes ("20GB"; default 20 GB, at most 80% of the
                     disk's free space), shared by every process that uses the folder
    weights          with a list of datasets: draw from them in these proportions
                     (packer.read.mix; [1, 1, ...] if only samples= is given), or
                     "sizes": in proportion to their samples (each once an epoch)
    samples          the length of a mix's epoch (default: until its first dataset to
                     run out has given each of its samples once)
    split            only the samples of this split, made when the dataset was packed
                     (`packer pack --split`, or its train/, val/, test/ folders)
    streams          cut each rank's share into this many streams, so that
                     packer.DataLoader makes the same batches in the same order whatever
                     its num_workers (packer.read.streams); default: one per worker
    """
    order = None
    if split is not None and (weights is not None or samples is not None):
        raise ValueError(f"split={split!r} reads one split of one dataset; a mix "
                         "(weights=, samples=) takes whole datasets")
    if weights is not None or samples is not None:
        source, order = mix.open_mix(path, weights, samples, unit=unit, shuffle=shuffle,
                                     seed=seed, holdout=holdout, cache_dir=cache_dir,
                                     cache_limit=cache_limit)
    else:
        source = open_parts(path, cache_dir, cache_limit)
    return PackedDataset(source, order=order, shuffle=shuffle, seed=seed,
                         decode=decode, image_size=image_size, transform=transform,
                         decoders=decoders, rank=rank, world_size=world_size, remainder=remainder,
                         on_error=on_error, shuffle_buffer=shuffle_buffer, unit=unit,
                         holdout=holdout, exact_resize=exact_resize, threads=threads,
                         split=split, streams=streams)
