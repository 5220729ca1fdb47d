"""One `packer pack` at a time into an `s3://` URL: a lock object beside it.

    s3://bucket/prefix           the dataset (or the one object s3://bucket/x.h5)
    s3://bucket/prefix.lock      {"host", "pid", "since"} of the run writing it

A bucket has no flock: the lock object is created with a conditional put
(If-None-Match: *), which the store refuses when the object exists, so of two runs only
one creates it; the other is refused with the holder's host, process and start time.
A lock left by a run killed on this machine (its process is gone) is taken over with a
put conditional on its ETag (If-Match), so a `--resume` after a kill needs nothing
more; one left by a run killed on another machine is removed by hand, as the message
says. The run removes its lock when it ends, failed or not.
"""

import json
import os
import socket
from contextlib import contextmanager
from datetime import UTC, datetime

from packer.errors import UsageProblem
from packer.storage import client
from packer.storage.url import S3Url

LOCK_SUFFIX = ".lock"


def lock_url(target: S3Url) -> S3Url:
    """The lock object of a dataset URL: beside its prefix, never under it."""
    return S3Url(target.bucket, target.key + LOCK_SUFFIX if target.key else "packer.lock")


@contextmanager
def bucket_lock(target: S3Url):
    """Hold the lock object of `target` for the block; a UsageProblem when another live
    run holds it."""
    url = lock_url(target)
    mine = json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                       "since": datetime.now(UTC).isoformat(timespec="seconds")}).encode()
    while client.put_if(url, mine) is None:
        found = client.read_versioned(url)
        if found is None:  # removed since: try again
            continue
        data, etag = found
        holder = _holder(data)
        if not _dead_here(holder) or client.put_if(url, mine, etag) is None:
            raise UsageProblem(_held_message(target, url, holder))
        break
    try:
        yield
    finally:
        try:
            client.delete(S3Url(url.bucket, ""), [url.key])
        except client.StorageError:  # the store is gone: the run's own error says so
            pass


def _holder(data: bytes) -> dict:
    try:
        holder = json.loads(data)
    except ValueError:
        return {}
    return holder if isinstance(holder, dict) else {}


def _dead_here(holder: dict) -> bool:
    """Whether the lock's run was on this machine and its process is gone."""
    if holder.get("host") != socket.gethostname() or not isinstance(holder.get("pid"), int):
        return False
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return holder["pid"] == os.getpid()  # never ours: a run holds one lock at a time


def _held_message(target: S3Url, url: S3Url, holder: dict) -> str:
    who = (f"process {holder.get('pid', '?')} on {holder.get('host', '?')}, since "
           f"{holder.get('since', '?')}")
    return (f"{target}: another `packer pack` is writing this URL now ({url} is held by "
            f"{who}); wait for it to end, or choose another -o. If that run no longer "
            f"runs (killed on another machine), remove the lock: aws s3 rm {url}")
