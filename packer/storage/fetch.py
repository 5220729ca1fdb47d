"""A source that is one object (a table, a binary dump), copied whole to the cache to be
packed as a local file: `packer pack s3://bucket/export.xlsx ...`.

    CACHE_DIR/sources/<digest of the URL and ETag>/NAME              the checked copy
    CACHE_DIR/sources/<digest of the URL and ETag>/NAME.part-XXXX    while downloading

The copy is renamed to NAME only when its size, and its sha256 (recorded by packer's
uploads) or its MD5 (the ETag of an object uploaded in one part), match what the store
says; a copy of another version of the object has another folder. The copy is kept
until its pack completes, so that `--resume` packs the same bytes, then removed.
"""

import hashlib
import secrets
import shutil
from pathlib import Path

from packer.errors import PackerError
from packer.storage.cache import default_dir
from packer.storage.client import (
    DIGEST_METADATA,
    _missing,
    check_bucket,
    client,
    download,
    storage_errors,
)
from packer.storage.url import parse

SOURCES = "sources"


def names_object(url_text: str) -> bool:
    """Whether the URL is the key of one object (not only a prefix of objects)."""
    url = parse(url_text)
    return bool(url.key) and _head(url) is not None


def _head(url) -> dict | None:
    from botocore.exceptions import ClientError

    with storage_errors(url):
        try:
            return client().head_object(Bucket=url.bucket, Key=url.key)
        except ClientError as err:
            if _missing(err):
                check_bucket(url)
                return None
            raise


def fetch_object(url_text: str) -> Path:
    """The checked local copy of the object at the URL (downloaded unless it is there)."""
    url = parse(url_text)
    answer = _head(url)
    if answer is None:
        raise PackerError(f"{url}: deleted while it was being opened; run the command again")
    size, etag = answer["ContentLength"], answer["ETag"]
    folder = default_dir() / SOURCES / hashlib.sha256(f"{url} {etag}".encode()).hexdigest()[:16]
    copy = folder / url.name
    if copy.is_file() and copy.stat().st_size == size:
        return copy
    temp = copy.with_name(f"{copy.name}.part-{secrets.token_hex(4)}")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with open(temp, "wb") as file:
            written, sha256 = download(url, file)
        _check_copy(url, temp, written, sha256, answer)
        temp.rename(copy)
    except OSError as err:
        raise PackerError(f"{folder}: cannot copy {url} there to pack it ({err.strerror}); "
                          "free some space, or set XDG_CACHE_HOME to another disk") from None
    finally:
        temp.unlink(missing_ok=True)
    return copy


def _check_copy(url, temp: Path, written: int, sha256: str, answer: dict) -> None:
    """A PackerError when the copy is not the object the store described."""
    size, etag = answer["ContentLength"], answer["ETag"].strip('"')
    recorded = answer.get("Metadata", {}).get(DIGEST_METADATA)
    if written == size and recorded:
        if sha256 == recorded:
            return
    elif written == size and "-" not in etag:  # a one-part upload: the ETag is the MD5
        with open(temp, "rb") as file:
            if hashlib.file_digest(file, "md5").hexdigest() == etag:
                return
    elif written == size:
        return  # a multipart ETag is no digest of the bytes; the size is all there is
    raise PackerError(f"{url}: the copy downloaded ({written:,} bytes) is not the object the "
                      f"store lists ({size:,} bytes, ETag {etag}): it changed or was damaged "
                      "on the way; run the command again")


def remove_copy(copy: Path) -> None:
    """Remove a copy once its pack is complete."""
    shutil.rmtree(copy.parent, ignore_errors=True)
