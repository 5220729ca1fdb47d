"""Where the test cluster and a local Ray instance listen: every listening socket of
their processes on the loopback address (docs/storage.md, "What listens where")."""

import ipaddress
import json
import os
import subprocess
import sys
from collections.abc import Iterable

import psutil

from ray_cluster import cluster, cluster_nodes, ray  # noqa: F401  (fixtures)


def test_the_test_cluster_uses_only_loopback_addresses(cluster):
    """Its nodes advertise (and its tasks run at) a loopback address, as does the
    address the packs connect to."""
    host = cluster.rpartition(":")[0]
    nodes = [node for node in ray.nodes() if node["Alive"]]
    used = {host, *(node["NodeManagerAddress"] for node in nodes)}
    assert len(nodes) == 2
    assert all(ipaddress.ip_address(address).is_loopback for address in used), used


def is_loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    return (getattr(address, "ipv4_mapped", None) or address).is_loopback  # ::ffff:127.0.0.1


def listening(processes: Iterable[psutil.Process]) -> set[tuple[str, int, str]]:
    """The TCP sockets that `processes` listen on: (address, port, process name)."""
    found = set()
    for process in processes:
        try:
            found |= {(c.laddr.ip, c.laddr.port, process.name())
                      for c in process.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
        except psutil.Error:  # ended meanwhile
            pass
    return found


def in_sessions(leaders: set[int]) -> list[psutil.Process]:
    """The processes of the sessions whose leaders are `leaders` (their pids)."""
    found = []
    for process in psutil.process_iter():
        try:
            if os.getsid(process.pid) in leaders:
                found.append(process)
        except OSError:
            pass
    return found


@ray.remote(num_cpus=1)
def worker_pid() -> int:
    return os.getpid()


def test_the_test_cluster_listens_on_loopback_only(cluster_nodes):
    """Every server of both nodes (GCS, raylets and their object managers, agents, the
    Ray Client server, a worker on each node) and of this driver."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    _, nodes = cluster_nodes
    on_each_node = [worker_pid.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
        node["NodeID"], soft=False)).remote() for node in ray.nodes() if node["Alive"]]
    workers = ray.get(on_each_node)
    processes = [psutil.Process(), *in_sessions({node.pid for node in nodes})]
    assert len(set(workers)) == 2 and set(workers) <= {p.pid for p in processes}
    sockets = listening(processes)
    assert {"gcs_server", "raylet"} <= {name for *_, name in sockets}
    assert [s for s in sockets if not is_loopback(s[0])] == []


LOCAL_INSTANCE_SOCKETS = """
import json, os, psutil
from packer.packing.ray_engine import ray_cluster

def worker_pid(item):
    return os.getpid()

with ray_cluster(None) as run_tasks:
    workers = list(run_tasks(worker_pid, [1]))
    processes = [psutil.Process(), *psutil.Process().children(recursive=True)]
    sockets = []
    for process in processes:
        try:
            sockets += [[c.laddr.ip, c.laddr.port, process.name()]
                        for c in process.net_connections("tcp")
                        if c.status == psutil.CONN_LISTEN]
        except psutil.Error:
            pass
    print(json.dumps({"workers": workers, "pids": [p.pid for p in processes],
                      "sockets": sockets}))
"""


def test_the_local_engine_listens_on_loopback_only():
    """The local Ray instance of `--engine ray` without --address: its own process, out
    of the mode this module sets for its cluster."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
    done = subprocess.run([sys.executable, "-c", LOCAL_INSTANCE_SOCKETS], capture_output=True,
                          text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert set(seen["workers"]) <= set(seen["pids"])
    assert {"gcs_server", "raylet"} <= {name for *_, name in seen["sockets"]}
    assert [s for s in seen["sockets"] if not is_loopback(s[0])] == []


# Formats whose files two runs write byte for byte the same, whatever the engine: two
# local packs to LMDB differ in its pages' unused bytes, to HDF5 in the manifest it holds
# (its time); their parts' samples_sha256 and their samples are compared instead.
