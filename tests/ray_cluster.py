"""A Ray cluster of two nodes started here for the tests (a head and a second node, one
CPU each), on the loopback address only: `cluster_nodes` (its address and node
processes) and `cluster` (its address), module fixtures a test file imports."""

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from s3_server import aws_environment

# Set before Ray is imported, which reads them once: a token of the test cluster's own
# for its nodes and for the packs' connections, no usage reports, and Ray's mode for a
# machine that is not part of a cluster (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0), in which
# `ray start --node-ip-address` and `ray.init(address=...)` keep 127.0.0.1 as given
# instead of replacing it with the machine's own address
# (ray._private.services.resolve_ip_for_localhost).
os.environ.update({"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token",
                   "RAY_AUTH_TOKEN": uuid.uuid4().hex, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"})
ray = pytest.importorskip("ray")
RAY = str(Path(sys.executable).with_name("ray"))


# The address the test cluster's nodes use and advertise. Ray's servers (GCS, raylet,
# object manager, workers, agents, Ray Client server) listen on the loopback address
# when the node's address is 127.0.0.1 (or ::1, or localhost), and on every interface
# for any other, 127.0.0.2 included: see docs/storage.md.
LOOPBACK = "127.0.0.1"
# `ray start` for the node that joins the cluster: in the mode above `ray start`
# refuses to join a cluster ("Multi-node Ray clusters are not supported"), and out of
# it, it replaces 127.0.0.1 in --address and --node-ip-address; this one keeps them.
JOIN = """
import sys
from ray._private import services
from ray.scripts.scripts import cli
services.resolve_ip_for_localhost = lambda host: host
cli(["start", *sys.argv[1:]])
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _ray_start(*args: str, log: Path, env: dict, join: bool = False) -> subprocess.Popen:
    """One Ray node as a process of its own session (--block: it stops its processes
    when it is stopped), on ports of its own, with `env` added to its environment; with
    `join`, a node that joins the cluster at --address."""
    ports = [f"--{name}={free_port()}" for name in (
        "node-manager-port", "object-manager-port", "dashboard-agent-listen-port",
        "dashboard-agent-grpc-port", "metrics-export-port", "runtime-env-agent-port")]
    if join:
        env = {**env, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1"}
    start = [sys.executable, "-c", JOIN] if join else [RAY, "start"]
    command = [*start, "--block", "--num-cpus=1", "--object-store-memory=150000000",
               "--disable-usage-stats", *ports, *args]
    with open(log, "w") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, env={**os.environ, **env})


ALIVE_NODES = """
import sys, ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
print(sum(node["Alive"] for node in ray.nodes()))
"""


def _alive_nodes(address: str) -> int:
    """Asked from a process of its own: a process that starts and stops many Ray
    sessions can crash at exit (ray-project/ray#31145), and this is asked once a second."""
    done = subprocess.run([sys.executable, "-c", ALIVE_NODES, address], capture_output=True,
                          text=True, timeout=60)
    if done.returncode:
        raise ConnectionError(done.stderr[-500:])
    return int(done.stdout.split()[-1])


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)  # whatever of its session is left
    except ProcessLookupError:
        pass
    process.wait()


@pytest.fixture(scope="module")
def cluster_nodes(request):
    """The address of a two-node Ray cluster on this machine, whose nodes reach the
    session's S3 server (where the s3 extra is installed) through their own AWS
    environment, as the nodes of a real cluster do, and its nodes' `ray start`
    processes, each the leader of a session that holds the node's processes."""
    temp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))  # socket paths must be short
    env = (aws_environment(request.getfixturevalue("moto_server"), temp)
           if importlib.util.find_spec("moto") else {})
    port = free_port()
    address = f"{LOOPBACK}:{port}"
    nodes = [_ray_start("--head", f"--port={port}", "--include-dashboard=false",
                        f"--ray-client-server-port={free_port()}", f"--temp-dir={temp}",
                        f"--node-ip-address={LOOPBACK}", log=temp / "head.log", env=env)]
    try:
        _wait_for(lambda: _alive_nodes(address) >= 1, temp / "head.log")
        nodes.append(_ray_start(f"--address={address}", f"--node-ip-address={LOOPBACK}",
                                log=temp / "node.log", env=env, join=True))
        _wait_for(lambda: _alive_nodes(address) == 2, temp / "node.log")
        # One session for the module's packs, which use a connection this process
        # holds: one session per pack would start and stop many in this process
        ray.init(address=address, logging_level="ERROR", log_to_driver=False)
        try:
            yield address, nodes
        finally:
            ray.shutdown()
    finally:
        for node in reversed(nodes):
            _stop(node)
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(cluster_nodes):
    """The address of the two-node Ray cluster."""
    return cluster_nodes[0]


def _wait_for(ready, log: Path, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if ready():
                return
        except ConnectionError:
            pass
        time.sleep(1)
    raise AssertionError(f"the Ray node did not start: {log.read_text()[-2000:]}")


