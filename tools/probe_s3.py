"""The `s3://` probes of tools/probe_faults.py, on a moto server on 127.0.0.1 that the
probe starts (the `s3` extra installs it). Each try is a fresh `packer` process:

- kills: `packer pack -o s3://...` killed at a random moment (slow uploads, so most
  kills cut the upload), then `--resume` with other options or another input, then
  `--resume` with the first ones; right when each run either publishes exactly the
  samples of its own input and options or refuses with a message (the last one, the
  same request, must publish);
- concurrent writers: two `packer pack ... --overwrite` runs with other options started
  together into one URL; right when what is published reads back as the pack of a run
  that said it published, and `verify` says OK; a refused run is a clear error;
- stale: plain shards read once through the cache, one rewritten in the bucket at its
  size (a byte flipped), read again; right when the second read gives the new samples;
- bucket damage: a part of a packed dataset grown, truncated or flipped in the bucket,
  then `verify`; right never, clear when it refuses naming the part;
- damaged cache: a cached part flipped, zeroed or truncated, then `verify`; right when
  it says OK (the copy downloaded again) and the samples read back the same.

Every outcome is one of: right, clear (a non-zero exit with a message), silent (exit 0
with the wrong data, or a refusal that does not say what), traceback, hang.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

OUTCOMES = ("right", "clear", "silent", "traceback", "hang")
SLOW_UPLOADS = ("import sys, time, packer.storage.client as c\n"
                "upload = c.upload\n"
                "def slow(*a, **k):\n    time.sleep(0.1)\n    upload(*a, **k)\n"
                "c.upload = slow\n"
                "from packer.cli import cli\ncli(sys.argv[1:], prog_name='packer')\n")
SAMPLES = ("import hashlib, json, sys, packer\n"
           "ds = packer.open_dataset(sys.argv[1] if len(sys.argv) == 2 else sys.argv[1:], "
           "decode='raw')\n"
           "print(json.dumps(sorted((s['__key__'], hashlib.sha256(s['jpg']).hexdigest()) "
           "for s in ds)))\n")
UPLOAD = ("import boto3, sys\ns3 = boto3.client('s3')\n"
          "for path, key in zip(sys.argv[1::2], sys.argv[2::2], strict=True):\n"
          "    s3.upload_file(path, 'probe', key)\n")
PUT = ("import boto3, sys; boto3.client('s3').put_object(Bucket='probe', Key=sys.argv[1], "
       "Body=open(sys.argv[2], 'rb').read())")
BUCKET = "probe"
TIMEOUT = 180  # seconds a run may take before it counts as a hang


@contextmanager
def moto_server(work: Path):
    """The environment of `packer` processes pointed at a fresh moto server."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                               str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    env = {**os.environ, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
           "AWS_ACCESS_KEY_ID": "probe", "AWS_SECRET_ACCESS_KEY": "probe",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": str(work / "no-aws"),
           "AWS_SHARED_CREDENTIALS_FILE": str(work / "no-aws"),
           "XDG_CACHE_HOME": str(work / "cache-home")}
    try:
        for _ in range(600):
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        python(env, f"import boto3; boto3.client('s3').create_bucket(Bucket='{BUCKET}')")
        yield env
    finally:
        server.terminate()
        server.wait()


def python(env: dict, code: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=TIMEOUT)


def packer(env: dict, *args) -> subprocess.CompletedProcess:
    return python(env, SLOW_UPLOADS, *args)


def attempt(run, *args):
    """The finished run, or None when it ran past TIMEOUT."""
    try:
        return run(*args)
    except subprocess.TimeoutExpired:
        return None


def judged(done: subprocess.CompletedProcess | None, right: bool) -> str:
    """The outcome of one run: `right` says whether an exit 0 left the right data."""
    if done is None:
        return "hang"
    if done.returncode < 0 or "Traceback" in done.stderr + done.stdout:
        return "traceback"
    if done.returncode:
        return "clear" if (done.stdout + done.stderr).strip() else "silent"
    return "right" if right else "silent"


def samples(env: dict, *dataset) -> list | None:
    """(key, sha256 of the image) of every sample of a dataset, or of a list of shards."""
    done = attempt(python, env, SAMPLES, *dataset)
    return json.loads(done.stdout) if done is not None and done.returncode == 0 else None


def report(what: str, outcome: str, done) -> None:
    if outcome not in ("right", "clear"):
        print(f"{what}: {outcome}: {(done.stderr if done else 'no end')[-600:]}",
              file=sys.stderr)


def kill_once(env: dict, variants: dict, references: dict, trial: int, rng) -> list[str]:
    """Kill, resume with another variant, resume with the first: the outcomes."""
    url = f"s3://{BUCKET}/resumed-{trial}"
    first = "base"
    other = rng.choice([name for name in variants if name != first])
    killed = subprocess.Popen([sys.executable, "-c", SLOW_UPLOADS,
                               *map(str, ["pack", *variants[first], "-o", url, "-q"])],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(rng.uniform(0.5, 5.0))
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    outcomes = []
    for name in (other, first):
        done = attempt(packer, env, "pack", *variants[name], "-o", url, "--resume", "-q")
        right = done is not None and done.returncode == 0 and \
            samples(env, url) == references[name]
        outcomes.append(judged(done, right))
        report(f"kill {trial} ({other} after a kill, then {first})", outcomes[-1], done)
    if outcomes[-1] == "clear":  # the same input and options must resume
        report(f"kill {trial}: the same request refused", "silent", done)
        outcomes[-1] = "silent"
    return outcomes


def concurrent_once(env: dict, variants: dict, references: dict, trial: int,
                    rng) -> list[str]:
    """Two --overwrite packs with other options into one URL at once."""
    url = f"s3://{BUCKET}/concurrent-{trial % 4}"  # a URL that holds an older dataset
    names = rng.sample(["base", "max-count", "to"], 2)
    runs = [subprocess.Popen([sys.executable, "-c", SLOW_UPLOADS,
                              *map(str, ["pack", *variants[name], "-o", url, "--overwrite",
                                         "-q"])],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True) for name in names]
    finished = []
    for process in runs:
        try:
            out, err = process.communicate(timeout=TIMEOUT)
            finished.append(subprocess.CompletedProcess(process.args, process.returncode,
                                                        out, err))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            finished.append(None)
    published = samples(env, url)
    verified = attempt(packer, env, "verify", url, "-q")
    whole = verified is not None and verified.returncode == 0
    said_published = [name for name, done in zip(names, finished, strict=True)
                      if done is not None and done.returncode == 0]
    right = whole and any(published == references[name] for name in said_published)
    outcomes = []
    for name, done in zip(names, finished, strict=True):
        outcome = judged(done, right)
        if outcome == "clear" and "another `packer pack`" not in done.stderr + done.stdout:
            outcome = "silent" if not said_published else outcome
        outcomes.append(outcome)
        report(f"concurrent {trial} ({name} of {names})", outcome, done)
    return outcomes


def stale_once(env: dict, work: Path, shards: Path, trial: int, rng) -> str:
    """Plain shards read, one rewritten at its size, read again."""
    prefix = f"plain-{trial}"
    local = work / prefix
    shutil.rmtree(local, ignore_errors=True)
    shutil.copytree(shards, local)
    names = sorted(p.name for p in local.glob("*.tar"))
    python(env, UPLOAD, *[arg for name in names for arg in (local / name, f"{prefix}/{name}")])
    url = f"s3://{BUCKET}/{prefix}"
    samples(env, url)
    target = local / rng.choice(names)
    with tarfile.open(target) as tar:
        member = rng.choice([m for m in tar.getmembers() if m.size])
    data = bytearray(target.read_bytes())
    data[member.offset_data + rng.randrange(member.size)] ^= 0xFF
    target.write_bytes(bytes(data))
    python(env, UPLOAD, target, f"{prefix}/{target.name}")
    expected = samples(env, *(local / name for name in names))
    done = attempt(python, env, SAMPLES, url)
    right = done is not None and done.returncode == 0 and json.loads(done.stdout) == expected
    outcome = judged(done, right)
    report(f"stale {trial} ({target.name})", outcome, done)
    shutil.rmtree(local, ignore_errors=True)
    return outcome


def bucket_damage_once(env: dict, work: Path, packed: str, shards: Path, trial: int,
                       rng) -> str:
    """A part of a packed dataset grown, truncated or flipped in the bucket, then
    `verify`; put back after."""
    part = rng.choice(sorted(p.name for p in shards.glob("*.tar")))
    key = f"{packed[len(f's3://{BUCKET}/'):]}/{part}"
    data, how = bytearray((shards / part).read_bytes()), rng.choice(["grow", "cut", "flip"])
    if how == "grow":
        data += bytes(rng.choice([1, 4096, 1 << 20]))
    elif how == "cut":
        del data[rng.randrange(len(data)):]
    else:
        data[rng.randrange(len(data))] ^= 0xFF
    damaged = work / "damaged-object"
    damaged.write_bytes(bytes(data))
    python(env, PUT, key, damaged)
    done = attempt(packer, env, "verify", packed, "-q")
    outcome = judged(done, right=False)  # a damaged part is never OK
    if outcome == "clear" and f"{packed}/{part}" not in done.stdout + done.stderr:
        outcome = "silent"  # refused, but without naming the part
    report(f"bucket damage {trial} ({how} {part})", outcome, done)
    python(env, PUT, key, shards / part)
    return outcome


def damaged_cache_once(env: dict, work: Path, packed: str, reference: list, trial: int,
                       rng) -> str:
    """A cached part damaged, then `verify` and a read."""
    attempt(packer, env, "verify", packed, "-q")  # every part in the cache
    cached = [p for p in (work / "cache-home" / "packer" / "parts").rglob("*")
              if p.is_file() and p.stat().st_size and ".part-" not in p.name]
    target = rng.choice(cached)
    data = bytearray(target.read_bytes())
    start, how = rng.randrange(len(data)), rng.choice(["flip", "zero", "cut"])
    if how == "cut":
        del data[start:]
    else:
        for at in range(start, min(len(data), start + rng.choice([1, 8, 512, 4096]))):
            data[at] = data[at] ^ 0xFF if how == "flip" else 0
    target.write_bytes(bytes(data))
    done = attempt(packer, env, "verify", packed, "-q")
    right = done is not None and done.returncode == 0 and samples(env, packed) == reference
    outcome = judged(done, right)
    report(f"damaged cache {trial} ({how} at {start} of {target.name})", outcome, done)
    return outcome


def probe_s3(work: Path, images: Path, trials: int, rng) -> dict[str, Counter]:
    """Run every s3:// probe `trials` times: {probe: Counter of outcomes}."""
    work = work / "s3"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    changed = work / "changed-input"
    shutil.copytree(images, changed)
    next(changed.rglob("*.jpg")).unlink()
    variants = {"base": [images, "--max-count", 40],
                "max-count": [images, "--max-count", 60],
                "to": [images, "--to", "tfrecord", "--max-count", 40],
                "input": [changed, "--max-count", 40]}
    results = {name: Counter() for name in ("kills", "concurrent writers", "stale",
                                            "bucket damage", "damaged cache")}
    with moto_server(work) as env:
        references = {}
        for name, args in variants.items():
            local = work / f"reference-{name}"
            packer(env, "pack", *args, "-o", local, "-q")
            references[name] = samples(env, local)
        for trial in range(trials):
            results["kills"].update(kill_once(env, variants, references, trial, rng))
            print(f"kills {trial + 1}/{trials}: {dict(results['kills'])}", file=sys.stderr)
        for trial in range(trials):
            results["concurrent writers"].update(concurrent_once(env, variants, references,
                                                                 trial, rng))
        shards = work / "reference-base"
        for trial in range(trials):
            results["stale"][stale_once(env, work, shards, trial, rng)] += 1
        packed = f"s3://{BUCKET}/packed"
        packer(env, "pack", *variants["base"], "-o", packed, "-q")
        for trial in range(trials):
            results["bucket damage"][bucket_damage_once(env, work, packed, shards, trial,
                                                        rng)] += 1
        for trial in range(trials):
            results["damaged cache"][damaged_cache_once(env, work, packed,
                                                        references["base"], trial, rng)] += 1
    return results
