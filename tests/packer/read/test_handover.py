"""Batches handed over from the workers a few at a time, given in torch's order, counted
worker by worker; and torch's pinning thread passing over them on their way."""

import gc
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from torch.utils.data._utils.pin_memory import pin_memory

import packer
from conftest import class_images, run
from packer.formats.spans import Spans
from packer.read import collate, ring
from packer.read import handover as crossing


def made(count: int, nbytes: int = 8):
    """(batch, positions) pairs as a worker makes them."""
    return [({"__key__": [f"k{i}"], "x": torch.zeros(nbytes, dtype=torch.uint8)}, 3)
            for i in range(count)]


def of(worker: int, pairs: list) -> list:
    """The pairs tagged with the worker of the plan they are of."""
    return [(worker, pair) for pair in pairs]


def test_a_worker_hands_over_up_to_a_group_of_batches_and_its_bytes(monkeypatch):
    handovers = list(crossing.handed_over(of(1, made(19)), True, crossing.GROUP))
    assert [len(h.batches) for h in handovers] == [8, 8, 3]
    assert all(h.worker == 1 and h.sizes == (3,) * len(h.batches) for h in handovers)
    assert [len(h.batches) for h in crossing.handed_over(of(0, made(3)), True, 1)] == [1, 1, 1]
    monkeypatch.setattr(crossing, "GROUP_BYTES", 20)
    assert [len(h.batches) for h in crossing.handed_over(of(0, made(7, 8)), True, 8)] == [3, 3, 1]
    jpegs = [({"__key__": ["k"], "jpg": [b"x" * 100, b"y" * 50]}, 2) for _ in range(5)]
    monkeypatch.setattr(crossing, "GROUP_PIPED", 300)
    assert [len(h.batches) for h in crossing.handed_over(of(0, jpegs), True, 8)] == [2, 2, 1]
    assert [b["__key__"] for b in crossing.handed_over(of(0, made(2)), False, 8)] == [["k0"],
                                                                                     ["k1"]]


def test_a_handover_holds_the_batches_of_one_stream():
    """A worker reading several streams (packer.read.streams) hands over each stream's
    consecutive batches together, never two streams' in one."""
    rounds = [(stream, pair) for pair in made(2) for stream in (1, 3)]
    rounds += of(3, made(2))
    handovers = list(crossing.handed_over(rounds, True, 8))
    assert [(h.worker, len(h.batches)) for h in handovers] == [(1, 1), (3, 1), (1, 1), (3, 3)]


def handover(worker: int, first: int, count: int) -> crossing.Handover:
    return crossing.Handover(worker, (1,) * count, [f"w{worker}b{i}"
                                                   for i in range(first, first + count)])


def test_handovers_are_given_in_torchs_order_of_batches():
    """torch takes each worker's items in turn; a handover holds several batches: the
    batches come one of each worker's in turn, passing over workers that are done."""
    items = [handover(0, 0, 2), handover(1, 0, 2), handover(0, 2, 2), handover(1, 2, 1),
             handover(0, 4, 1)]
    order = [batch for batch, _, _ in crossing.in_turn(items, [5, 3])]
    assert order == ["w0b0", "w1b0", "w0b1", "w1b1", "w0b2", "w1b2", "w0b3", "w0b4"]
    assert [worker for _, worker, _ in crossing.in_turn(items, [5, 3])] == [0, 1] * 3 + [0, 0]
    # fewer batches than counted, or more: every batch still comes, once
    assert sorted(b for b, _, _ in crossing.in_turn(items, [7, 3])) == sorted(order)
    assert sorted(b for b, _, _ in crossing.in_turn(items, [2, 1])) == sorted(order)


def test_torchs_pinning_thread_passes_over_batches_on_their_way():
    """torch's pinning thread pins whatever has pin_memory(): a slot's storage and its
    counts too, which left the training process copies: the worker never learnt that a
    slot was free, and after its slots every batch crossed as a new shared file."""
    slots = ring.WorkerSlots()
    ref = slots.ref(slots.tensor((2, 3)))
    shipped = crossing.Shipped({"x": ref, "__key__": ["a", "b"]}, (), ("x",))
    group = crossing.Handover(0, (2,), [shipped])
    out = pin_memory(group)
    assert out is group and out.batches[0].batch["x"].storage is ref.storage


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    root = tmp_path_factory.mktemp("handover")
    run("pack", class_images(root / "images", 2, 45), "--to", "lmdb", "-o", root / "raw.lmdb",
        "--resize", "8x8", "--encode", "raw", "-q")
    return root / "raw.lmdb"


@pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker processes")
@pytest.mark.parametrize("drop_last", [False, True])
def test_what_each_worker_delivered_is_counted_exactly(raw, drop_last):
    ds = packer.open_dataset(raw, shuffle=True, seed=4)
    loader = packer.DataLoader(ds, batch_size=4, num_workers=3, drop_last=drop_last)
    got = [key for batch in loader for key in batch["__key__"]]
    sizes = ds.worker_sizes(3)  # 30 each: 7 batches of 4 and one of 2
    delivered = [size - size % 4 if drop_last else size for size in sizes]
    assert len(got) == len(set(got)) == sum(delivered)
    assert ds.state_dict()["consumed"] == delivered
    assert ds.worker_batches(3, 4, drop_last) == [size // 4 if drop_last else -(-size // 4)
                                                  for size in sizes]


@pytest.mark.parametrize("stop", [0, 3, 6, 13, 22])
def test_a_resume_after_any_batch_of_a_handover_delivers_the_rest_once(raw, stop):
    """Stopped after batch `stop` (inside a handover or at its end), a resumed read
    gives exactly the samples not yet seen, in the order the whole epoch has them."""
    def loader(state=None):
        ds = packer.open_dataset(raw, shuffle=True, seed=9)
        if state:
            ds.load_state_dict(state)
        return ds, packer.DataLoader(ds, batch_size=4, num_workers=2)

    ds, whole = loader()
    epoch = [key for batch in whole for key in batch["__key__"]]
    ds, first = loader()
    seen = []
    for number, batch in enumerate(first):
        seen += batch["__key__"]
        if number == stop:
            break
    rest = [key for batch in loader(ds.state_dict())[1] for key in batch["__key__"]]
    assert sorted(seen + rest) == sorted(epoch) and len(seen + rest) == len(epoch)
    assert seen + rest == epoch  # the rest in the order of the uninterrupted epoch


@pytest.fixture
def in_a_worker(monkeypatch):
    """shipped() as a DataLoader worker runs it, with slots of its own."""
    monkeypatch.setattr(crossing, "get_worker_info", lambda: object())
    monkeypatch.setattr(collate, "get_worker_info", lambda: object())
    monkeypatch.setattr(ring, "_WORKER", {})
    return ring.worker_slots()


def test_bytes_values_cross_in_a_slot_and_land_as_the_same_bytes(in_a_worker):
    values = [bytes([i]) * (100 + i) for i in range(64)] + [b""]
    out = crossing.shipped({"__key__": ["k"] * 65, "jpg": values, "cls": torch.arange(65)})
    assert out.packed == ("jpg",) and isinstance(out.batch["jpg"], crossing.SlotBytes)
    slot = out.batch["jpg"].pieces[0][0].slot
    assert crossing.landed(out)["jpg"] == values
    # copied out, the values refer to nothing in the slot: it is let go of at once
    assert in_a_worker.returned.tolist()[:1] == in_a_worker.lent.tolist()[:1] == [1]
    # a slot has room to spare: a batch a little larger than the first one reuses it
    again = crossing.shipped({"jpg": [b"x" * 9000]})
    assert again.batch["jpg"].pieces[0][0].slot == slot == 0 and len(in_a_worker.storages) == 1
    assert crossing.landed(again)["jpg"] == [b"x" * 9000]


def test_bytes_values_cross_in_the_pickle_when_no_slot_is_free(in_a_worker, monkeypatch):
    monkeypatch.setattr(ring, "SLOTS", 1)
    held = crossing.shipped({"jpg": [b"a" * 10]})
    out = crossing.shipped({"jpg": [b"b" * 10, b"c"], "txt": ["not bytes"]})
    assert held.packed == ("jpg",) and out.packed == ()
    assert out.batch["jpg"] == [b"b" * 10, b"c"] and out.batch["txt"] == ["not bytes"]
    assert crossing.shipped({"jpg": [b"", b""]}).batch["jpg"] == [b"", b""]  # nothing to copy
    # the bytes in slots count towards a handover's tensor bytes, those in the pickle apart
    monkeypatch.setattr(ring, "SLOTS", 32)
    monkeypatch.setattr(crossing, "GROUP_BYTES", 250)
    jpegs = [({"jpg": [b"x" * 100]}, 1) for _ in range(7)]
    assert [len(h.batches) for h in crossing.handed_over(of(0, jpegs), True, 8)] == [3, 3, 1]


def test_no_slot_is_made_where_shared_memory_is_short(in_a_worker, monkeypatch):
    """A container's /dev/shm is 64 MB unless told otherwise: a slot is made only with
    four times its size free there, else the bytes cross in the pickle."""
    class Short:
        f_bavail, f_frsize = 5, 4096  # 20 KB free

    monkeypatch.setattr(ring.os, "statvfs", lambda path: Short)
    assert in_a_worker.in_slot((4096,)) is None  # a slot of two pages (room to spare)
    assert crossing.shipped({"jpg": [b"x" * 5000]}).batch["jpg"] == [b"x" * 5000]
    assert in_a_worker.in_slot((512,)) is not None  # a slot of one page fits 4 times


def test_values_read_into_a_window_slot_do_not_weigh_on_a_handover(in_a_worker, monkeypatch):
    """The window's slot holds them whatever the handover: up to GROUP batches go
    together; values copied into slots of their own count their bytes."""
    monkeypatch.setattr(crossing, "GROUP_BYTES", 100)
    window = collate.slot_buffer(1000)
    window[:] = np.arange(1000) % 251
    spans = Spans(window, np.arange(0, 1000, 100), np.arange(100, 1001, 100))
    made = [({"jpg": [Spans(window, spans.starts[i:i + 1], spans.ends[i:i + 1])]}, 1)
            for i in range(10)]
    handovers = list(crossing.handed_over(of(0, made), True, 8))
    assert [len(h.batches) for h in handovers] == [8, 2]
    got = [crossing.landed(b)["jpg"][0] for h in handovers for b in h.batches]
    assert got == [window[i * 100:(i + 1) * 100].tobytes() for i in range(10)]
    copied = [({"jpg": [b"x" * 100]}, 1) for _ in range(3)]
    assert [len(h.batches) for h in crossing.handed_over(of(0, copied), True, 8)] == [1, 1, 1]


def _freeze_count(path):
    def record(worker_id):
        with open(f"{path}.{worker_id}", "w") as out:
            out.write(str(gc.get_freeze_count()))
    return record


@pytest.mark.parametrize("frozen_before", [False, True])
def test_workers_fork_with_the_training_process_objects_frozen(raw, tmp_path, frozen_before):
    """A collection in a worker before it reads would copy every page of the objects it
    inherits: they are frozen when it forks (and not unfrozen here if the program froze
    objects itself)."""
    gc.unfreeze()  # (`packer pack` run in this process froze its objects)
    if frozen_before:
        gc.freeze()
    try:
        ds = packer.open_dataset(raw)
        loader = packer.DataLoader(ds, batch_size=8, num_workers=1,
                                   worker_init_fn=_freeze_count(tmp_path / "count"))
        assert sum(len(b["__key__"]) for b in loader) == len(ds)
        assert int((tmp_path / "count.0").read_text()) > 1000  # frozen before torch's setup
        assert (gc.get_freeze_count() > 0) == frozen_before
    finally:
        gc.unfreeze()


def test_a_write_to_a_pipe_after_each_epoch_arrives_whole(raw, tmp_path):
    """Workers that exited in a thread after the epoch sent their SIGCHLD into the
    training process's write(2) to a pipe, and Python's buffered writer lost the rest
    (a log through `| tee`). They end with the epoch now, as torch's do."""
    script = tmp_path / "epochs_and_logs.py"
    script.write_text(
        "import sys, packer\n"
        f"ds = packer.open_dataset({str(raw)!r}, shuffle=True)\n"
        "loader = packer.DataLoader(ds, batch_size=4, num_workers=2)\n"
        "for epoch in range(4):\n"
        "    ds.set_epoch(epoch)\n"
        "    for batch in loader:\n"
        "        pass\n"
        "    sys.stdout.write(str(epoch) * 200_000)\n"
        "    sys.stdout.flush()\n")
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL)
    received = bytearray()
    while chunk := process.stdout.read(4096):  # a slow reader: the writer waits on it
        received += chunk
        time.sleep(0.001)
    assert process.wait(timeout=300) == 0
    assert received.decode() == "".join(str(epoch) * 200_000 for epoch in range(4))


@pytest.mark.parametrize("ending", ["after the epoch", "halfway"])
def test_a_program_that_ends_as_its_workers_exit_ends_cleanly(raw, tmp_path, ending):
    """The workers of the last epoch are still exiting when the program ends: it waits
    for them before it tears itself down (a thread caught in that tore the process
    down with an abort), and their exit is no worker failure."""
    script = tmp_path / "one_epoch.py"
    script.write_text(
        "import sys, packer\n"
        f"ds = packer.open_dataset({str(raw)!r}, shuffle=True)\n"
        "for number, batch in enumerate(packer.DataLoader(ds, batch_size=4, num_workers=2)):\n"
        f"    if {ending == 'halfway'} and number == 5:\n"
        "        break\n"
        "print('read', number + 1)\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("read ") and done.stderr == ""


def _fd_handovers(monkeypatch) -> list:
    """File descriptors this process receives from workers, as they come."""
    from multiprocessing import resource_sharer

    received = []
    detach = resource_sharer.DupFd.detach

    def recorded(self):
        received.append(self)
        return detach(self)
    monkeypatch.setattr(resource_sharer.DupFd, "detach", recorded)
    return received


@pytest.mark.parametrize("shm", ["roomy", "full"])
def test_forked_workers_batches_cross_without_file_descriptors(raw, monkeypatch, shm):
    """A forked worker's slots lie in memory mapped for it before it forked: none
    crosses by file descriptor (a handshake with the worker each), and a full /dev/shm
    (a container's, 64 MB) does not matter to them."""
    class Full:
        f_bavail, f_frsize = 0, 4096

    if shm == "full":
        monkeypatch.setattr(ring.os, "statvfs", lambda path: Full)
    received = _fd_handovers(monkeypatch)
    ds = packer.open_dataset(raw, shuffle=True, seed=1)
    expected = sorted(s["__key__"] for s in packer.iter_samples(raw))
    for _ in range(2):  # epochs
        images = list(packer.DataLoader(ds, batch_size=4, num_workers=2))
        assert sorted(k for batch in images for k in batch["__key__"]) == expected
    assert received == [] and len(ring.LANDING.arenas) <= 4
    assert images[0]["rgb.npy"].shape == (4, 3, 8, 8)


def test_a_program_ends_with_a_loader_iterator_still_holding_its_workers(raw):
    """Step-based training keeps `iter(loader)` to the end; at exit, the workers are
    let go of without a thread (none starts once the interpreter is ending)."""
    program = ("import packer\n"
               f"ds = packer.open_dataset({str(raw)!r})\n"
               "it = iter(packer.DataLoader(ds, batch_size=8, num_workers=2))\n"
               "next(it)\nprint('read')\n")
    ended = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                           timeout=120)
    assert ended.returncode == 0 and ended.stdout == "read\n", ended.stderr


def test_a_state_taken_before_an_epochs_first_batch_resumes_with_any_workers(raw):
    ds = packer.open_dataset(raw, shuffle=True, seed=2)
    for _ in packer.DataLoader(ds, batch_size=8, num_workers=2):
        pass
    ds.set_epoch(1)
    state = ds.state_dict()  # a checkpoint at the top of the epoch
    again = packer.open_dataset(raw, shuffle=True, seed=2)
    again.load_state_dict(state)
    keys = []
    for number, batch in enumerate(packer.DataLoader(again, batch_size=8, num_workers=2)):
        keys += batch["__key__"]
        if number == 2:
            checkpoint = again.state_dict()  # the resumed run's own next checkpoint
    assert sorted(keys) == sorted(s["__key__"] for s in packer.iter_samples(raw))
    last = packer.open_dataset(raw, shuffle=True, seed=2)
    last.load_state_dict(checkpoint)
    rest = [k for batch in packer.DataLoader(last, batch_size=8, num_workers=2)
            for k in batch["__key__"]]
    assert sorted(keys[:24] + rest) == sorted(keys)


def test_len_counts_the_batches_left_after_a_loaded_state(raw):
    ds = packer.open_dataset(raw)
    first = iter(packer.DataLoader(ds, batch_size=4, num_workers=2))
    for _ in range(5):
        next(first)
    state = ds.state_dict()
    del first
    again = packer.open_dataset(raw)
    again.load_state_dict(state)
    loader = packer.DataLoader(again, batch_size=4, num_workers=2)
    assert len(loader) == sum(1 for _ in loader) == len(packer.DataLoader(ds, batch_size=4,
                                                                          num_workers=2)) - 5
