"""A packing worker's unit of work: a run of samples read, checked, transformed (with
--resize or --encode) and encoded by the format, with the keys and content digests a
split or --dedupe needs; and how its bytes cross to the writing process: a spool file,
checked when it is read back."""

import os

from isal import isal_zlib

from packer.errors import PackerError
from packer.formats import format_module
from packer.formats.base import Chunk, encode_chunk
from packer.packing.sample_log import sample_facts
from packer.sources.files.read import read_file

SPOOL_NAME = "spool"


def pack_chunk(job: tuple) -> Chunk:
    """Read, check, transform (with --resize or --encode) and encode a run of samples:
    the unit of work of a worker.

    A worker process writes the encoded bytes to a spool file instead of returning
    them: a pipe would copy every byte several times in the main process.
    """
    read_job, source_job, fmt, spool, transform, logged = job
    outcomes = read_job(source_job)
    outcomes = transform.apply(outcomes) if transform else outcomes
    chunk = encode_chunk(outcomes, format_module(fmt))
    if logged:
        keys, contents = sample_facts(outcomes)
        chunk = chunk._replace(keys=keys, contents=contents)
    if spool is None:
        return chunk
    with open(spool, "xb") as file:  # never a file that another run's worker made
        file.write(chunk.blob)
    return chunk._replace(blob=b"", spool=spool, spool_crc=isal_zlib.crc32(chunk.blob))


def unspool(chunk: Chunk) -> Chunk:
    """The chunk with its bytes read back from its spool file, checked against the
    lengths and CRC-32 its worker sent."""
    if chunk.spool is None:
        return chunk
    blob = read_file(chunk.spool)
    os.unlink(chunk.spool)
    if len(blob) != sum(chunk.lengths) or isal_zlib.crc32(blob) != chunk.spool_crc:
        raise PackerError(f"{chunk.spool}: the spool file does not hold what its worker "
                          f"wrote ({len(blob):,} bytes, {sum(chunk.lengths):,} expected); "
                          "some other process wrote to it. Nothing was published; run "
                          "the same command with --resume")
    return chunk._replace(blob=blob, spool=None)
