"""Packing: a source scanned, read in workers, written by a format (pipeline.py), into a
local path or, staged locally and uploaded as its parts close, into object storage
(to_s3.py)."""

from packer.storage.url import is_s3


def pack(path, out, options, on_part=None) -> dict:
    """Pack `path` (a folder of files, or with --spec a binary dump or a folder of them,
    or a table; or an s3:// prefix of files) into `out` (a local path, or an s3:// URL)
    with `options` (a PackOptions); returns the manifest. `on_part(folder, part)` is
    called as each part closes (local packs)."""
    if is_s3(out):
        from packer.packing.to_s3 import pack_to_s3

        return pack_to_s3(path, out, options)
    from packer.packing.pipeline import pack_local

    return pack_local(path, out, options, on_part)
