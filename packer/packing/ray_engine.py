"""Packing on a Ray cluster (`packer pack --engine ray`).

The same ordered map as the local engine (packer/packing/parallel.py), with Ray tasks
for worker processes: each task reads, checks and encodes one run of whole samples (a
`Chunk`, the local workers' unit, returned through Ray's object store instead of a
spool file), and this process, the driver, takes the chunks back in input order and
writes every part, the progress file and the manifest with the format's own writer.

    driver: scan -> jobs ---------------------------> writer -> parts, progress, manifest
                       \\-> task -> Chunk (in order) -/
                        \\-> task -> Chunk ----------/      (at most 2 per cluster CPU in flight)

Why the driver writes: where a part ends depends on the encoded size of every sample
before it and on which inputs are skipped, known only once they are read, so no task
can know in advance which samples make a whole part; and one writer in one process is
what makes every format (tar shards, TFRecord parts, one LMDB, one HDF5 file) byte for
byte the same as `--engine local`, and `--resume` continue after the last closed part
with either engine. The input must be readable at the same path on every node; an
s3:// source is read by the tasks themselves, each node's with its own AWS configuration
(AWS_ENDPOINT_URL, credentials) and client.

A task whose worker process dies, or that raises an OSError, is retried by Ray
(`RETRIES` times); one that still fails stops the pack with the partial output kept
for `--resume`, and nothing published.
"""

import logging
import socket
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from packer.errors import PackerError, Resumable, UsageProblem

RETRIES = 3  # Ray's max_retries for each task
IN_FLIGHT_PER_CPU = 2
CONNECT_SECONDS = 10


def import_ray():
    """The `ray` module, or a UsageProblem that says how to install it."""
    try:
        import ray
    except ImportError:
        raise UsageProblem("--engine ray needs Ray, which is not installed: "
                           "pip install 'packer[ray]' (ray>=2.9), on every node of the "
                           "cluster, or leave out --engine ray") from None
    return ray


@contextmanager
def ray_cluster(address: str | None):
    """A connection to the cluster at `address` (as `ray.init` takes it: `auto`,
    `ray://HOST:10001`, `HOST:PORT`), or to a new local instance when None, whose servers
    listen on the loopback address only. A connection that this process already holds
    (its own `ray.init`) is used as it is and left open."""
    ray = import_ray()
    owned = not ray.is_initialized()
    if owned:
        _connect(ray, address)
    try:
        yield RayMap(ray)
    finally:
        if owned:
            ray.shutdown()


def check_cluster(address: str | None) -> None:
    """Before the scan: Ray is installed, and the cluster at `address` takes connections
    (for HOST:PORT and ray://HOST:PORT, where Ray itself would retry for minutes; `auto`
    is Ray's to find)."""
    import_ray()
    host, colon, port = (address or "").removeprefix("ray://").rpartition(":")
    if not colon or not port.isdigit():
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_SECONDS):
            pass
    except OSError as err:
        raise _unreachable(address, err) from None


def _connect(ray, address: str | None) -> None:
    settings = {"logging_level": logging.ERROR, "log_to_driver": False}
    try:
        if address is None:
            with _single_machine_mode():
                ray.init(address="local", _node_ip_address="127.0.0.1",
                         include_dashboard=False, **settings)
        else:
            ray.init(address=address, **settings)
    except (OSError, RuntimeError, ValueError) as err:  # ConnectionError, TimeoutError
        raise _unreachable(address, err) from None


@contextmanager
def _single_machine_mode():
    """Ray's mode for a machine that is not part of a cluster while a local instance
    starts, so that its servers listen on the loopback address only. Ray's servers bind
    to the loopback address when the node's address is one (127.0.0.1, ::1, localhost)
    and to every interface otherwise, and `ray.init` replaces a loopback node address
    with the machine's own (ray._private.services.resolve_ip_for_localhost) unless Ray
    runs in this mode, which RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 sets when Ray is
    imported: set here for the start only, a process may connect to a cluster later."""
    from ray._private import ray_constants

    saved = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved


def _unreachable(address: str | None, err: Exception) -> PackerError:
    where = f"--address {address}" if address else "a local Ray instance"
    detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return PackerError(f"{where}: cannot connect to a Ray cluster ({detail}). Start one with "
                       "`ray start --head`, give its address (auto on a node of the cluster, "
                       "HOST:PORT, or ray://HOST:10001), or leave out --address for a local "
                       "instance")


class RayMap:
    """`map(function, items)` as Ray tasks, results in input order, a bounded number in
    flight so that the driver's memory does not grow with the input."""

    def __init__(self, ray):
        self.ray = ray

    def __call__(self, function: Callable, items: Iterable) -> Iterator:
        ray = self.ray
        # SPREAD, as Ray Data schedules its reads: the default would keep short tasks
        # on the driver's node while it has a free CPU, and read every input there
        task = ray.remote(function).options(num_cpus=1, max_retries=RETRIES,
                                            retry_exceptions=[OSError],
                                            scheduling_strategy="SPREAD")
        cpus = int(ray.cluster_resources().get("CPU", 1))
        window = max(2, IN_FLIGHT_PER_CPU * cpus)
        pending: deque = deque()
        try:
            for item in items:
                pending.append(task.remote(item))
                if len(pending) >= window:
                    yield self._result(pending.popleft())
            while pending:
                yield self._result(pending.popleft())
        finally:
            for left in pending:  # an error, or the driver stopping: no orphaned work
                ray.cancel(left, force=True)

    def _result(self, ref):
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayTaskError as err:
            if isinstance(err.cause, PackerError):
                raise err.cause from None
            raise _failed(err) from None
        except self.ray.exceptions.RayError as err:
            raise _failed(err) from None


def _failed(err: Exception) -> Resumable:
    lines = [line for line in str(err).splitlines() if line.strip()]
    detail = f"{type(err).__name__}: {lines[-1].strip() if lines else ''}"
    return Resumable(f"a packing task failed on the Ray cluster after {RETRIES} retries "
                     f"({detail}). Nothing was published; the parts packed so far are kept: "
                     "run the same command with --resume to continue")
