"""Batch buffers that a DataLoader worker fills again and again, shared once.

torch hands a tensor in shared memory from a worker to the training process as a file
descriptor, over a socket connection of its own, and the training process maps it
afresh: about a millisecond for each batch of 64 small images, more than reading them.
A worker here keeps a few buffers (slots) in shared memory and sends each one once;
after that, a batch names its slot, and the training process sees the slot's memory
again without a handover. The training process marks a slot free (in a small shared
flag array of the worker's) once nothing refers to its memory any more: no batch, no
view of one. A worker writes only into free slots; when none is, it takes a new one, up
to SLOTS, then a buffer of torch's usual kind.
"""

import os
from typing import NamedTuple

import numpy as np
import torch

SLOTS = 32  # buffers per worker: the batches of 4 handovers (packer.read.batches)
_FREE, _LENT = 0, 1

# the count of references to a storage's memory (torch's own; a torch without it
# shares every buffer the usual way)
_use_count = getattr(torch._C, "_storage_Use_Count", None)


def _shared(nbytes: int) -> torch.UntypedStorage:
    return torch.UntypedStorage._new_shared(nbytes)


def _slot_size(nbytes: int) -> int:
    """A new slot's size: the next power of two, so that a slot first made for one
    batch of bytes values also holds the slightly larger ones after it (the pages past
    what is written are never touched, and take no memory)."""
    return 1 << max(nbytes - 1, 1).bit_length()


class SlotRef(NamedTuple):
    """A tensor in a slot, as it crosses: the storage and the flags only the first time."""

    owner: int  # the worker's slots' own number (a pid can be reused)
    pid: int
    slot: int
    storage: torch.UntypedStorage | None
    flags: torch.Tensor | None
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int


class WorkerSlots:
    """A worker's slots: `tensor(shape)` gives a uint8 tensor in a free one."""

    def __init__(self):
        self.flags = torch.zeros(SLOTS, dtype=torch.uint8).share_memory_()
        self.storages: list[torch.UntypedStorage] = []
        self.sent: set[int] = set()  # slots whose storage the training process has
        self.flags_sent = False
        self.token = int.from_bytes(os.urandom(8), "little")
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
        self.flags[slot] = _LENT
        return torch.empty(0, dtype=torch.uint8).set_(self.storages[slot], 0, shape)

    def _free_slot(self, nbytes: int) -> int | None:
        if _use_count is None:
            return None
        flags = self.flags.numpy()
        for slot in np.flatnonzero(flags[:len(self.storages)] == _FREE).tolist():
            if self.storages[slot].nbytes() >= nbytes:
                return slot
        if len(self.storages) == SLOTS:
            return None
        self.storages.append(_shared(_slot_size(nbytes)))
        self._by_pointer[self.storages[-1].data_ptr()] = len(self.storages) - 1
        return len(self.storages) - 1

    def ref(self, tensor: torch.Tensor) -> SlotRef | None:
        """How `tensor` crosses if it lies in a slot; None if not."""
        slot = self._by_pointer.get(tensor.untyped_storage().data_ptr())
        if slot is None:
            return None
        storage = None if slot in self.sent else self.storages[slot]
        flags = None if self.flags_sent else self.flags
        self.sent.add(slot)
        self.flags_sent = True
        return SlotRef(self.token, os.getpid(), slot, storage, flags, tuple(tensor.shape),
                       tensor.stride(), tensor.storage_offset())


_WORKER: dict[int, WorkerSlots] = {}


def worker_slots() -> WorkerSlots:
    """This worker process's slots (a forked child starts with none of its parent's)."""
    pid = os.getpid()
    if pid not in _WORKER:
        _WORKER.clear()
        _WORKER[pid] = WorkerSlots()
    return _WORKER[pid]


class Landing:
    """The training process's side: the slots' storages and flags by worker, and the
    slots lent to batches not yet released. One for the process, so that persistent
    workers' slots stay known from one epoch (and one DataLoader iterator) to the next."""

    def __init__(self):
        self.storages: dict[tuple[int, int], torch.UntypedStorage] = {}
        self.flags: dict[int, np.ndarray] = {}
        self.pids: dict[int, int] = {}
        self.lent: list[tuple[int, int]] = []

    def tensor(self, ref: SlotRef) -> torch.Tensor:
        key = (ref.owner, ref.slot)
        if ref.storage is not None:
            self.storages[key] = ref.storage
        if ref.flags is not None:  # as numpy: a torch item assignment costs far more
            self.flags[ref.owner], self.pids[ref.owner] = ref.flags.numpy(), ref.pid
        self.lent.append(key)
        return torch.empty(0, dtype=torch.uint8).set_(self.storages[key], ref.offset,
                                                       ref.size, ref.stride)

    def release(self) -> None:
        """Mark free the lent slots nothing refers to any more."""
        still = []
        for key in self.lent:
            if _use_count(self.storages[key]._cdata) > 1:
                still.append(key)
            else:
                self.flags[key[0]][key[1]] = _FREE
        self.lent = still

    def forget_exited(self) -> None:
        """Let go of the slots of workers that have exited (their batches keep what
        they still refer to)."""
        gone = {owner for owner, pid in self.pids.items() if not _alive(pid)}
        if gone:
            self.storages = {k: v for k, v in self.storages.items() if k[0] not in gone}
            self.lent = [key for key in self.lent if key[0] not in gone]
            for owner in gone:
                del self.flags[owner], self.pids[owner]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


LANDING = Landing()
