"""A real S3-compatible server for the tests: moto's standalone server on 127.0.0.1.

`moto_server` starts one per test session on a free port (and stops it after);
`s3` points the AWS environment at it and gives each test a bucket of its own;
`start_server` starts a private one, for tests that stop or misconfigure it.
"""

import itertools
import os
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import pytest

_BUCKETS = itertools.count()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(**env) -> tuple[subprocess.Popen, str]:
    """A moto server process and its endpoint URL, once it accepts connections."""
    pytest.importorskip("moto.server", reason="the s3 tests need moto[server] (the s3 extra)")
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                                str(port)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env={**os.environ, **env})
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return process, f"http://127.0.0.1:{port}"
        except OSError:
            if process.poll() is not None:
                pytest.fail(f"moto server exited with {process.returncode}")
            time.sleep(0.05)
    process.kill()
    pytest.fail("moto server did not start in 30 s")


def stop_server(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="session")
def moto_server():
    process, endpoint = start_server()
    yield endpoint
    stop_server(process)


def aws_environment(endpoint: str, folder) -> dict[str, str]:
    """The standard AWS variables for `endpoint`, with no ~/.aws file read (for a
    process of its own, such as a Ray node)."""
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_CONFIG_FILE": str(folder / "no-aws-config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(folder / "no-aws-credentials")}


def point_at(monkeypatch, endpoint: str, tmp_path) -> None:
    """The standard AWS variables set for `endpoint`; no ~/.aws file is read, and the
    default cache is in `tmp_path`."""
    from packer.storage import client

    for name, value in {**aws_environment(endpoint, tmp_path),
                        "XDG_CACHE_HOME": str(tmp_path / "cache-home")}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(client, "_CLIENTS", {})  # a client made for another endpoint


@pytest.fixture
def s3(moto_server, monkeypatch, tmp_path):
    """A new bucket on the session's server, the environment pointed at it: its name."""
    from packer.storage.client import client

    point_at(monkeypatch, moto_server, tmp_path)
    bucket = f"test-{os.getpid()}-{next(_BUCKETS)}"
    client().create_bucket(Bucket=bucket)
    return bucket


def upload_folder(folder, bucket: str, prefix: str) -> None:
    """Every file of a local folder put under s3://bucket/prefix/, as any tool would."""
    from packer.storage.client import client

    for path in sorted(folder.rglob("*")):
        if path.is_file():
            client().upload_file(str(path), bucket, f"{prefix}/{path.relative_to(folder)}")


@contextmanager
def cache_peak(cache, limit: int):
    """Watch the part cache at `cache` in a thread while the block runs: yields a list
    whose one item is the most bytes it held."""
    from packer.storage.cache import PartCache

    peak, done = [0], threading.Event()

    def watch():
        while not done.is_set():
            peak[0] = max(peak[0], PartCache(cache, limit).usage())

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        yield peak
    finally:
        done.set()
        watcher.join()
