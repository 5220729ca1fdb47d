"""Batch buffers that a DataLoader worker fills again and again, shared once.

torch hands a tensor in shared memory from a worker to the training process as a file
descriptor, over a socket connection of its own, and the training process maps it
afresh: about a millisecond for each batch of 64 small images, more than reading them.
A worker here keeps a few buffers (slots) in shared memory and sends each one once;
after that, a batch names its slot, and the training process sees the slot's memory
again without a handover. A slot may hold one batch, or the bytes of several (a window
of tar members read into it at once): the worker counts the references to each slot it
sends, and the training process counts, in a small shared array of the worker's, those
it has let go of, once nothing refers to the slot's memory any more (no batch, no view
of one; bytes values copied out of a slot refer to nothing, and let it go at once). A
worker writes again only into a slot whose every reference has come back and that
nothing in the worker refers to; when none is free, it takes a new one, up to SLOTS,
then a buffer of torch's usual kind.

Forked workers take their slots from memory the training process mapped for each of
them before it forked (an arena): both see it from the start, so no slot crosses by a
file descriptor at all (4 ms and more each, for a handshake with the worker), and the
counts of references let go of lie in its first page. A worker's slots that do not fit
in its arena, and those of workers that were not forked, are shared files.
"""

import ctypes
import mmap
import os
from typing import NamedTuple

import numpy as np
import torch
from torch.utils.data import get_worker_info

from packer.formats.spans import Spans

SLOTS = 32  # buffers per worker: the batches of 4 handovers (packer.read.handover)
ARENA_BYTES = 256 << 20  # address space for a forked worker's slots (used as written)
_PAGE = 4096

# the count of references to a storage's memory (torch's own; a torch without it
# shares every buffer the usual way)
_use_count = getattr(torch._C, "_storage_Use_Count", None)


def _shared(nbytes: int) -> torch.UntypedStorage:
    return torch.UntypedStorage._new_shared(nbytes)


def _slot_size(nbytes: int) -> int:
    """A new slot's size: an eighth more than asked, in whole pages, so that a slot
    first made for one batch of bytes values, or one window, also holds the slightly
    larger ones after it. torch takes every page of a shared buffer when it makes it
    (to fail then rather than with a bus error later), so each byte of room costs
    memory, and time to clear it."""
    return -(-(nbytes + nbytes // 8) // _PAGE) * _PAGE


SHARED_MEMORY = "/dev/shm"


def _room_for(nbytes: int) -> bool:
    """Whether shared memory has room for a new slot of `nbytes`, four times over: a
    slot's pages are taken as they are written, and a full /dev/shm (64 MB in a
    container, unless told otherwise) would end a worker with a bus error."""
    try:
        stat = os.statvfs(SHARED_MEMORY)
    except OSError:  # no /dev/shm (macOS): the system's limits apply
        return True
    return stat.f_bavail * stat.f_frsize >= 4 * nbytes


class SlotRef(NamedTuple):
    """A tensor in a slot, as it crosses: the storage, and the worker's counts of
    references let go of, only the first time."""

    owner: int  # the worker's slots' own number (a pid can be reused)
    pid: int
    slot: int
    storage: torch.UntypedStorage | None
    returned: torch.Tensor | None
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int
    place: tuple[int, int] | None = None  # (offset, bytes) of a slot in the worker's arena


class Arena(NamedTuple):
    """Memory for a worker's slots, mapped before it forks."""

    owner: int
    memory: mmap.mmap


def _token() -> int:
    return int.from_bytes(os.urandom(8), "little")


def _view(memory: mmap.mmap, offset: int, nbytes: int) -> torch.UntypedStorage:
    """A storage of `nbytes` at `offset` of `memory` (which it keeps mapped)."""
    return torch.frombuffer(memory, dtype=torch.uint8, count=nbytes,
                            offset=offset).untyped_storage()


class WorkerSlots:
    """A worker's slots: `tensor(shape)` gives a uint8 tensor in a free one."""

    def __init__(self, arena: Arena | None = None):
        self.arena, self._arena_end = arena, _PAGE  # the first page: the counts
        self.token = arena.owner if arena else _token()
        # references to each slot the training process has let go of (it alone writes
        # them), and those sent
        if arena:
            self.returned = np.frombuffer(arena.memory, np.int64, count=SLOTS)
            self._returned_shared = None
        else:
            self._returned_shared = torch.zeros(SLOTS, dtype=torch.int64).share_memory_()
            self.returned = self._returned_shared.numpy()
        self.lent = np.zeros(SLOTS, np.int64)
        self.storages: list[torch.UntypedStorage] = []
        self.places: dict[int, tuple[int, int]] = {}  # slots in the arena: where
        self.sent: set[int] = set()  # slots whose storage the training process has
        self.returned_sent = arena is not None
        self._by_pointer: dict[int, int] = {}

    def tensor(self, shape: tuple[int, ...]) -> torch.Tensor:
        in_slot = self.in_slot(shape)
        if in_slot is not None:
            return in_slot
        return torch.empty(0, dtype=torch.uint8).set_(_shared(int(np.prod(shape))), 0, shape)

    def in_slot(self, shape: tuple[int, ...]) -> torch.Tensor | None:
        """A uint8 tensor in a free slot; None if there is none."""
        slot = self._free_slot(int(np.prod(shape)))
        if slot is None:
            return None
        return torch.empty(0, dtype=torch.uint8).set_(self.storages[slot], 0, shape)

    def _free_slot(self, nbytes: int) -> int | None:
        if _use_count is None:
            return None
        made = len(self.storages)
        for slot in np.flatnonzero(self.returned[:made] == self.lent[:made]).tolist():
            storage = self.storages[slot]  # below: none of the worker's tensors refers to it
            if storage.nbytes() >= nbytes and _use_count(storage._cdata) == 1:
                return slot
        if made == SLOTS:
            return None
        size = _slot_size(nbytes)
        if self.arena and self._arena_end + size <= len(self.arena.memory):
            self.places[made] = (self._arena_end, size)
            self._arena_end += size
            self.storages.append(_view(self.arena.memory, *self.places[made]))
        elif _room_for(size):
            self.storages.append(_shared(size))
        else:
            return None
        self._by_pointer[self.storages[-1].data_ptr()] = made
        return made

    def holds(self, tensor: torch.Tensor) -> bool:
        return tensor.untyped_storage().data_ptr() in self._by_pointer

    def ref(self, tensor: torch.Tensor) -> SlotRef | None:
        """How `tensor` crosses if it lies in a slot; None if not."""
        slot = self._by_pointer.get(tensor.untyped_storage().data_ptr())
        if slot is None:
            return None
        place = self.places.get(slot)
        storage = None if slot in self.sent or place else self.storages[slot]
        returned = None if self.returned_sent else self._returned_shared
        self.sent.add(slot)
        self.returned_sent = True
        self.lent[slot] += 1
        return SlotRef(self.token, os.getpid(), slot, storage, returned, tuple(tensor.shape),
                       tensor.stride(), tensor.storage_offset(), place)


_WORKER: dict[int, WorkerSlots] = {}
_ARENAS: dict[int, Arena] = {}  # by worker id: those of the workers about to fork


def worker_slots() -> WorkerSlots:
    """This worker process's slots (a forked child starts with none of its parent's),
    in the arena mapped for it if it was forked."""
    pid = os.getpid()
    if pid not in _WORKER:
        _WORKER.clear()
        info = get_worker_info()
        _WORKER[pid] = WorkerSlots(_ARENAS.get(info.id) if info is not None else None)
    return _WORKER[pid]


def map_arenas(workers: int) -> list[Arena]:
    """An arena for each of the `workers` about to fork (none where the system will not
    map one), which the training process knows. `forked()` once they have."""
    _ARENAS.clear()
    for worker in range(workers):
        try:
            memory = mmap.mmap(-1, ARENA_BYTES, flags=mmap.MAP_SHARED)
        except OSError:  # no address space or memory to commit: shared files it is
            break
        _ARENAS[worker] = Arena(_token(), memory)
        LANDING.know(_ARENAS[worker])
    return list(_ARENAS.values())


def forked() -> None:
    _ARENAS.clear()


class Landing:
    """The training process's side: the slots' storages and counts of references let
    go of by worker, and the references not yet let go of. One for the process, so that
    persistent workers' slots stay known from one epoch (and one DataLoader iterator) to
    the next."""

    def __init__(self):
        self.storages: dict[tuple[int, int], torch.UntypedStorage] = {}
        self.views: dict[tuple[int, int], memoryview] = {}  # of the storages' memory
        self.pointers: dict[tuple[int, int], int] = {}  # where arena slots' storages lie
        self.returned: dict[int, np.ndarray] = {}
        self.pids: dict[int, int] = {}
        self.lent: list[tuple[int, int]] = []
        self.arenas: dict[int, mmap.mmap] = {}
        self.epochs = 0  # loaders' epochs under way

    def begin_epoch(self) -> None:
        """A loader begins an epoch: the slots of workers that have exited are let go
        of, unless another loader is mid-epoch (a validation pass inside a training
        epoch), whose exited workers' batches may still be on their way."""
        if not self.epochs:
            self.forget_exited()
        self.epochs += 1

    def end_epoch(self) -> None:
        self.epochs -= 1

    def know(self, arena: Arena) -> None:
        self.arenas[arena.owner] = arena.memory
        self.returned[arena.owner] = np.frombuffer(arena.memory, np.int64, count=SLOTS)

    def forget_unused(self, arenas: list[Arena]) -> None:
        """Let go of those of `arenas` whose worker sent nothing (it has exited, or
        was never forked)."""
        for arena in arenas:
            if arena.owner not in self.pids:
                self.arenas.pop(arena.owner, None)
                self.returned.pop(arena.owner, None)

    def tensor(self, ref: SlotRef) -> torch.Tensor:
        """The tensor a slot holds: the slot's own memory where it lies in an arena;
        copied out of a shared file (a spawned worker's slot, or one past its arena),
        whose memory torch would pass as it is to any process the batch is sent to
        (a multiprocessing queue), where the slot's next batch would overwrite it."""
        key = self._known(ref)
        view = torch.empty(0, dtype=torch.uint8).set_(self.storages[key], ref.offset,
                                                      ref.size, ref.stride)
        if key in self.pointers:
            self.lent.append(key)
            return view
        copy = torch.empty_strided(view.size(), view.stride(), dtype=view.dtype)
        copy.copy_(view)
        self.returned[key[0]][key[1]] += 1
        return copy

    def values(self, ref: SlotRef, starts: np.ndarray, ends: np.ndarray) -> list[bytes]:
        """The bytes at [starts, ends) of a slot, each copied; the reference is let go
        of at once (a copy refers to nothing), and no tensor is made for it."""
        key = self._known(ref)
        view = self.views.get(key)
        if view is None:  # a view that holds no reference to the storage (the dict does)
            storage = self.storages[key]
            view = self.views[key] = memoryview(
                (ctypes.c_ubyte * storage.nbytes()).from_address(storage.data_ptr())).cast("B")
        values = Spans(view, starts + ref.offset, ends + ref.offset).values()
        self.returned[key[0]][key[1]] += 1
        return values

    def _known(self, ref: SlotRef) -> tuple[int, int]:
        key = (ref.owner, ref.slot)
        if ref.place is not None and (key not in self.storages or self._moved(key)):
            self.storages[key] = _view(self.arenas[ref.owner], *ref.place)
            self.pointers[key] = self.storages[key].data_ptr()
            self.pids[ref.owner] = ref.pid
        if ref.storage is not None:
            self.storages[key] = ref.storage
            self.views.pop(key, None)
        if ref.returned is not None:  # as numpy: a torch item assignment costs far more
            self.returned[ref.owner], self.pids[ref.owner] = ref.returned.numpy(), ref.pid
        return key

    def release(self) -> None:
        """Count as let go of the references to slots nothing refers to any more."""
        still = []
        for key in self.lent:
            if _use_count(self.storages[key]._cdata) > 1 and not self._moved(key):
                still.append(key)
            else:
                self.returned[key[0]][key[1]] += 1
        self.lent = still

    def _moved(self, key: tuple[int, int]) -> bool:
        """Whether an arena slot's storage no longer lies in the arena: a batch's
        `share_memory_()` (or torch passing it to another process) moves the storage
        of its tensor, with its contents, to shared memory of its own. The batch keeps
        that copy; the slot's memory is then referred to by nothing, and later batches
        in it need a storage of their own."""
        return key in self.pointers and self.storages[key].data_ptr() != self.pointers[key]

    def forget_exited(self) -> None:
        """Let go of the slots of workers that have exited (their batches keep what
        they still refer to)."""
        gone = {owner for owner, pid in self.pids.items() if not _alive(pid)}
        if gone:
            self.views = {k: v for k, v in self.views.items() if k[0] not in gone}
            self.storages = {k: v for k, v in self.storages.items() if k[0] not in gone}
            self.pointers = {k: v for k, v in self.pointers.items() if k[0] not in gone}
            self.lent = [key for key in self.lent if key[0] not in gone]
            for owner in gone:
                del self.returned[owner], self.pids[owner]
                self.arenas.pop(owner, None)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


LANDING = Landing()
