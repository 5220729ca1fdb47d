"""Packing on a Ray cluster of two nodes started here (a head and a second node, one CPU
each): the same bytes, manifest and skip reasons as the local engine, a task whose worker
dies retried, a pack whose tasks keep failing or whose driver is killed left unpublished
and resumed."""

import importlib.util
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

import psutil
import pytest

import packer
from conftest import KILL_AFTER_TWO_PARTS, run
from packer.errors import UsageProblem
from packer.formats import FORMAT_NAMES
from packer.packing.options import PackOptions
from packer.read.dataset import iter_samples
from s3_server import aws_environment, upload_folder

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
BYTE_REPRODUCIBLE = ("webdataset", "tfrecord")


def data_files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.name != "manifest.json"}


def comparable(manifest: dict) -> dict:
    """A manifest less what differs between any two runs (its time, its own digest)."""
    return {k: v for k, v in manifest.items() if k not in ("created", "manifest_sha256")}


@pytest.fixture
def mixed_folder(image_folder):
    """The image folder with a corrupt JPEG and an empty file: skip reasons to compare."""
    (image_folder / "cat" / "broken.jpg").write_bytes(b"not a jpeg at all")
    (image_folder / "dog" / "empty.png").write_bytes(b"")
    return image_folder


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_a_ray_pack_is_the_local_pack(fmt, mixed_folder, tmp_path, cluster):
    base = ["pack", mixed_folder, "--to", fmt, "--max-count", "4", "-q"]
    run(*base, "-o", tmp_path / "local")
    run(*base, "-o", tmp_path / "ray", "--engine", "ray", "--address", cluster)
    local, on_ray = packer.load_manifest(tmp_path / "local"), packer.load_manifest(tmp_path / "ray")
    assert comparable(local) == comparable(on_ray)
    assert {e["path"] for e in on_ray["skipped"]} >= {"cat/broken.jpg", "dog/empty.png"}
    if fmt in BYTE_REPRODUCIBLE:
        assert data_files(tmp_path / "local") == data_files(tmp_path / "ray")
    # and for every format: the parts' digests (above, in the manifests), the samples
    assert list(iter_samples(tmp_path / "local")) == list(iter_samples(tmp_path / "ray"))


def test_a_ray_pack_of_an_s3_prefix_is_the_local_pack(mixed_folder, tmp_path, cluster, s3):
    """The tasks read the objects themselves, on both nodes: a driver that read them
    could not, the read being patched out of this process."""
    import packer.sources.files.read as read

    upload_folder(mixed_folder, s3, "images")
    base = ["pack", "--max-count", "4", "-q"]
    run(*base, mixed_folder, "-o", tmp_path / "local")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(read, "fetch_object", None)  # the driver's copy: never called here
        run(*base, f"s3://{s3}/images", "-o", tmp_path / "ray", "--engine", "ray",
            "--address", cluster)
    local, on_ray = packer.load_manifest(tmp_path / "local"), packer.load_manifest(tmp_path / "ray")
    assert on_ray["source"].pop("path") == f"s3://{s3}/images"
    local["source"].pop("path")
    assert comparable(local) == comparable(on_ray)
    assert data_files(tmp_path / "local") == data_files(tmp_path / "ray")


def _dies_on(key: str, marker: Path | None):
    """A read_job for the files source whose worker process dies when its job holds the
    sample `key`: once (the first time, when `marker` is given), or every time."""
    from packer.sources.files.read import read_job

    def read_or_die(job):
        if any(sample[0] == key for sample in job[2]):
            if marker is None:
                os._exit(17)
            try:
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                os._exit(17)  # the first attempt only: the marker is there for the retry
            except FileExistsError:
                pass
        return read_job(job)

    return read_or_die


def _pack_with(monkeypatch, read_job, folder: Path, out: Path, cluster: str, expect=0):
    """`packer pack` on the cluster, its tasks reading with `read_job`."""
    import packer.packing.pipeline as pipeline

    scan_input = pipeline.open_source
    monkeypatch.setattr(pipeline, "CHUNK", 4)  # several tasks from a small folder
    monkeypatch.setattr(pipeline, "open_source",
                        lambda path, options: (scan_input(path, options)[0], read_job))
    return run("pack", folder, "-o", out, "--max-count", "3", "--engine", "ray", "--address",
               cluster, "-q", expect=expect)


def test_a_task_whose_worker_dies_is_retried(mixed_folder, tmp_path, cluster, monkeypatch):
    marker = tmp_path / "died-once"
    dies_once = _dies_on("cat/with space", marker)
    _pack_with(monkeypatch, dies_once, mixed_folder, tmp_path / "ray", cluster)
    assert marker.exists()  # a worker did die
    run("pack", mixed_folder, "--max-count", "3", "-o", tmp_path / "local", "-q")
    assert comparable(packer.load_manifest(tmp_path / "ray")) == comparable(
        packer.load_manifest(tmp_path / "local"))
    assert data_files(tmp_path / "ray") == data_files(tmp_path / "local")


def test_a_task_that_keeps_failing_stops_unpublished_and_resumes(mixed_folder, tmp_path,
                                                                   cluster, monkeypatch):
    out = tmp_path / "ray"
    failed = _pack_with(monkeypatch, _dies_on("dog/deep/er/多%2Edots%2Ein%2Ename", None),
                        mixed_folder, out, cluster, expect=1)
    assert "failed on the Ray cluster after 3 retries" in failed.output
    assert "--resume" in failed.output and "Traceback" not in failed.output
    assert not out.exists()
    progress = json.loads((tmp_path / "ray.partial" / "progress.json").read_text())
    assert progress["parts"] and progress["tally"]["next_input"] > 0
    monkeypatch.undo()
    args = ["pack", mixed_folder, "--max-count", "3", "-q"]
    resumed = run(*args, "-o", out, "--engine", "ray", "--address", cluster, "--resume")
    assert "packing again from the start" not in resumed.output
    run(*args, "-o", tmp_path / "local")
    assert data_files(out) == data_files(tmp_path / "local")
    assert "OK" in run("verify", out, "--against", mixed_folder, "-q").output


def test_a_killed_ray_driver_leaves_nothing_published_and_resumes(mixed_folder, tmp_path,
                                                                   cluster):
    out = tmp_path / "killed"
    args = ["pack", str(mixed_folder), "-o", str(out), "--max-count", "3", "-q", "--engine",
            "ray", "--address", cluster]
    killed = subprocess.run([sys.executable, "-c", KILL_AFTER_TWO_PARTS, *args])
    assert killed.returncode == -signal.SIGKILL
    assert not out.exists() and (tmp_path / "killed.partial" / "progress.json").exists()
    assert "packing again from the start" not in run(*args, "--resume").output
    run("pack", mixed_folder, "-o", tmp_path / "local", "--max-count", "3", "-q")
    assert data_files(out) == data_files(tmp_path / "local")


def test_what_the_ray_engine_refuses(image_folder, tmp_path):
    table = tmp_path / "t.csv"
    table.write_text("a,b,y\n1,2,0\n3,4,1\n")
    refused = run("pack", table, "--to", "hdf5", "--label-column", "y", "-o", tmp_path / "t.h5",
                  "--engine", "ray", expect=2)
    assert "as whole column blocks" in refused.output and not (tmp_path / "t.h5").exists()
    assert "--workers is for --engine local" in run(
        "pack", image_folder, "-o", tmp_path / "w", "--engine", "ray", "-j", "2",
        expect=2).output
    assert "pass --engine ray with it" in run(
        "pack", image_folder, "-o", tmp_path / "w", "--address", "auto", expect=2).output
    with pytest.raises(UsageProblem, match="pip install 'packer\\[ray\\]'"):
        _without_ray(image_folder, tmp_path)


def _without_ray(folder: Path, tmp_path: Path) -> None:
    saved = sys.modules.get("ray")
    sys.modules["ray"] = None  # `import ray` raises ImportError
    try:
        packer.pack(folder, tmp_path / "x", PackOptions(engine="ray", progress=False))
    finally:
        sys.modules["ray"] = saved


def test_an_unreachable_cluster_is_one_message(image_folder, tmp_path):
    result = run("pack", image_folder, "-o", tmp_path / "x", "--engine", "ray", "--address",
                 f"127.0.0.1:{free_port()}", expect=1)
    assert "cannot connect to a Ray cluster" in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "x").exists() and not (tmp_path / "x.partial").exists()
