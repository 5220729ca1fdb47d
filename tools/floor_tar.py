"""The least work a checked, deterministic tar packer can do in Python: a floor row
of tools/bench_pack.py.

Usage:
    python tools/floor_tar.py FOLDER OUT.tar [--processes 2]

A sorted walk of FOLDER; every file read, a JPEG's start and end markers checked
(a file that fails is left out), a ustar member with fixed metadata appended, and
the sha256 of the archive computed. With --processes N, N forked processes each
build the members of a run of files into a piece file, and this process joins the
pieces in order (copy_file_range) and hashes them. There is no manifest, no key
encoding, no labels, no skip report and no progress: packer does all of these, so
this is a speed it can approach but not pass.
"""

import argparse
import hashlib
import os
import tarfile
from multiprocessing import get_context

_TEMPLATE = bytearray(tarfile.TarInfo("").tobuf(tarfile.USTAR_FORMAT))
_TEMPLATE[148:156] = b" " * 8
_SUM = sum(_TEMPLATE) - sum(_TEMPLATE[124:136])
_IDS, _MTIME, _TAIL = bytes(_TEMPLATE[100:124]), bytes(_TEMPLATE[136:148]), bytes(_TEMPLATE[156:])
_NAME_FILL = [b"\0" * (100 - n) for n in range(101)]
_PADDING = [b"\0" * (-n % 512) for n in range(512)]


def walk(root: str, rel: str = "") -> list[str]:
    names = []
    for entry in sorted(os.scandir(os.path.join(root, rel)), key=lambda e: e.name):
        path = f"{rel}{entry.name}"
        names += walk(root, f"{path}/") if entry.is_dir() else [path]
    return names


def member(root: str, rel: str) -> list[bytes]:
    fd = os.open(f"{root}/{rel}", os.O_RDONLY)
    data = os.read(fd, os.fstat(fd).st_size + 1)
    os.close(fd)
    if rel.lower().endswith((".jpg", ".jpeg")) and not (
            data[:2] == b"\xff\xd8" and data.rfind(b"\xff\xd9") >= 0):
        return []
    raw = rel.encode("utf-8", "surrogateescape")
    if len(raw) > 100 or not raw.isascii():
        info = tarfile.TarInfo(rel)
        info.size, info.mode, info.mtime = len(data), 0o444, 0
        header = info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
    else:
        size = b"%011o\0" % len(data)
        checksum = b"%06o\0 " % (_SUM + sum(raw) + sum(size))
        header = b"".join((raw, _NAME_FILL[len(raw)], _IDS, size, _MTIME, checksum, _TAIL))
    return [header, data, _PADDING[len(data) % 512]]


def piece(job: tuple[str, list[str], str]) -> str:
    root, names, out = job
    with open(out, "wb") as file:
        file.write(b"".join(part for rel in names for part in member(root, rel)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder")
    parser.add_argument("out")
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args()
    names, digest = walk(args.folder), hashlib.sha256()
    step = max(1, -(-len(names) // (4 * args.processes)))
    jobs = [(args.folder, names[i:i + step], f"{args.out}.{i}")
            for i in range(0, len(names), step)]
    with get_context("fork").Pool(args.processes) as pool, open(args.out, "wb") as out:
        for path in pool.imap(piece, jobs):
            fd = os.open(path, os.O_RDONLY)
            size = os.fstat(fd).st_size
            digest.update(os.read(fd, size))
            os.copy_file_range(fd, out.fileno(), size, 0)
            os.close(fd)
            os.unlink(path)
        out.write(bytes(1024))
    digest.update(bytes(1024))
    print(digest.hexdigest())


if __name__ == "__main__":
    main()
