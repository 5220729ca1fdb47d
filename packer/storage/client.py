"""The S3 client (boto3), one per process, and what its errors mean.

Endpoint, region and credentials come from the standard AWS configuration only:
`AWS_ENDPOINT_URL` (any S3-compatible store), `AWS_REGION`/`AWS_DEFAULT_REGION`,
`AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`/`AWS_SESSION_TOKEN`, `AWS_PROFILE` and
`~/.aws/config` and `~/.aws/credentials`. Uploads go through boto3's transfer
manager, which sends a file of more than 8 MB as a multipart upload.
"""

import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from packer.errors import PackerError
from packer.storage.url import S3Url

DIGEST_METADATA = "sha256"  # x-amz-meta-sha256: the object's sha256, set by packer's uploads
_READ_BYTES = 1 << 20
_BODY_ATTEMPTS = 3  # GETs of an object whose body is cut short (boto3 retries the request)
_CLIENTS: dict[int, object] = {}  # by process id: a client never crosses a fork
_CREDENTIAL_CODES = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied",
                     "InvalidClientTokenId", "ExpiredToken", "InvalidToken", "403"}


class StorageError(PackerError):
    """Object storage refused or could not be reached; the message names the URL."""


# A store that does not answer is given up on in seconds, not minutes: each request waits
# at most this long to connect and for each read (not for a whole transfer), and is tried
# ATTEMPTS times in all, with a short backoff between.
CONNECT_TIMEOUT, READ_TIMEOUT, ATTEMPTS = 5, 10, 3


def client():
    """This process's S3 client (made on first use: boto3 is imported only then)."""
    if os.getpid() not in _CLIENTS:
        try:
            import boto3
            from botocore.config import Config
        except ImportError:
            raise PackerError("s3:// URLs need boto3, which packer installs with its s3 "
                              "extra: pip install 'packer[s3]'") from None
        # connections: as many as the GETs a packing worker makes at once (read.FETCHES)
        config = Config(retries={"max_attempts": ATTEMPTS, "mode": "standard"},
                        connect_timeout=CONNECT_TIMEOUT, read_timeout=READ_TIMEOUT,
                        max_pool_connections=16)
        _CLIENTS.clear()
        _CLIENTS[os.getpid()] = boto3.session.Session().client("s3", config=config)
    return _CLIENTS[os.getpid()]


def _endpoint() -> str:
    return os.environ.get("AWS_ENDPOINT_URL") or "the AWS default endpoint"


@contextmanager
def storage_errors(url) -> Iterator[None]:
    """Storage failures inside the block as one StorageError naming `url`."""
    from botocore import exceptions

    try:
        yield
    except exceptions.NoCredentialsError:
        raise StorageError(f"{url}: no AWS credentials found; set AWS_ACCESS_KEY_ID and "
                           "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE with ~/.aws/credentials"
                           ) from None
    except (exceptions.ConnectTimeoutError, exceptions.ReadTimeoutError) as err:
        raise StorageError(f"{url}: the object store at {_endpoint()} did not answer (each "
                           f"of {ATTEMPTS} tries waited {CONNECT_TIMEOUT} s to connect and "
                           f"{READ_TIMEOUT} s for data; {err}); check that it is up, and "
                           "AWS_ENDPOINT_URL") from None
    except (exceptions.EndpointConnectionError, exceptions.ConnectionClosedError) as err:
        raise StorageError(f"{url}: cannot reach the object store at {_endpoint()} ({err}); "
                           "check AWS_ENDPOINT_URL and the network") from None
    except exceptions.ClientError as err:
        raise client_error(err, url) from None


def client_error(err, url) -> StorageError:
    """A refused request as a StorageError that says what to check."""
    error = err.response.get("Error", {})
    code, message = str(error.get("Code", "")), error.get("Message", "")
    if code == "NoSuchBucket":
        return StorageError(f"{url}: no such bucket at {_endpoint()}; create it, or check "
                            "the URL and AWS_ENDPOINT_URL")
    if code in _CREDENTIAL_CODES:
        return StorageError(f"{url}: the object store at {_endpoint()} refused the "
                            f"credentials ({code}: {message or 'forbidden'}); check "
                            "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY or AWS_PROFILE")
    return StorageError(f"{url}: the object store at {_endpoint()} answered {code}: {message}")


def _missing(err) -> bool:
    return str(err.response.get("Error", {}).get("Code")) in ("404", "NoSuchKey", "NotFound")


def list_objects(url: S3Url) -> dict[str, tuple[int, str]]:
    """{name under the prefix: (bytes, ETag)} of every object under `url`."""
    objects = {}
    with storage_errors(url):
        pages = client().get_paginator("list_objects_v2").paginate(Bucket=url.bucket,
                                                                   Prefix=url.prefix)
        for page in pages:
            for item in page.get("Contents", []):
                objects[item["Key"][len(url.prefix):]] = (item["Size"], item["ETag"])
    return objects


def head(url: S3Url) -> tuple[int, str | None] | None:
    """(bytes, the sha256 packer recorded) of the object, or None when there is none."""
    from botocore.exceptions import ClientError

    with storage_errors(url):
        try:
            answer = client().head_object(Bucket=url.bucket, Key=url.key)
        except ClientError as err:
            if _missing(err):
                check_bucket(url)
                return None
            raise
    return answer["ContentLength"], answer.get("Metadata", {}).get(DIGEST_METADATA)


def check_bucket(url: S3Url) -> None:
    """A StorageError when the bucket of `url` does not exist or cannot be used."""
    from botocore.exceptions import ClientError

    with storage_errors(url):
        try:
            client().head_bucket(Bucket=url.bucket)
        except ClientError as err:
            if _missing(err):
                err.response["Error"]["Code"] = "NoSuchBucket"
            raise


def read_bytes(url: S3Url) -> bytes | None:
    """The whole (small) object, or None when there is none."""
    from botocore.exceptions import ClientError

    with storage_errors(url):
        try:
            return client().get_object(Bucket=url.bucket, Key=url.key)["Body"].read()
        except ClientError as err:
            if _missing(err):
                check_bucket(url)
                return None
            raise


def get_object(url: S3Url, etag: str, size: int, first: int | None = None) -> bytes | str:
    """The object's bytes (its first `first` bytes, by a ranged GET) when it is still as
    listed (`etag`, `size` bytes); otherwise the reason to skip it: gone, or changed."""
    from botocore.exceptions import ClientError, IncompleteReadError, ResponseStreamingError

    ranged = {"Range": f"bytes=0-{first - 1}"} if first else {}
    with storage_errors(url):
        for attempt in range(1, _BODY_ATTEMPTS + 1):
            try:
                answer = client().get_object(Bucket=url.bucket, Key=url.key, **ranged)
            except ClientError as err:
                if _missing(err):
                    return "deleted after the prefix was listed"
                raise
            now = (int(answer["ContentRange"].rpartition("/")[2]) if first
                   else answer["ContentLength"])
            if now != size or answer["ETag"] != etag:
                return (f"changed after the prefix was listed ({size:,} bytes, ETag {etag} "
                        f"then; {now:,} bytes, ETag {answer['ETag']} now)")
            try:
                return answer["Body"].read()
            except (IncompleteReadError, ResponseStreamingError) as err:
                if attempt == _BODY_ATTEMPTS:
                    raise StorageError(f"{url}: the download was cut short "
                                       f"{_BODY_ATTEMPTS} times ({err}); check the network "
                                       "and run the same command again") from None


def download(url: S3Url, file, limit: int | None = None) -> tuple[int, str]:
    """Stream the object into the open binary `file`: (bytes written, their sha256).
    With `limit` (the size expected), it stops one byte past it: an object that grew
    since is not written whole into a bounded cache to find out."""
    digest, written = hashlib.sha256(), 0
    with storage_errors(url):
        body = client().get_object(Bucket=url.bucket, Key=url.key)["Body"]
        while data := body.read(_READ_BYTES if limit is None
                                else min(_READ_BYTES, limit + 1 - written)):
            digest.update(data)
            file.write(data)
            written += len(data)
        body.close()
    return written, digest.hexdigest()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while data := file.read(_READ_BYTES):
            digest.update(data)
    return digest.hexdigest()


def upload(path: Path, url: S3Url, sha256: str) -> None:
    """Upload a file (multipart when large), its sha256 in the object's metadata."""
    with storage_errors(url):
        client().upload_file(str(path), url.bucket, url.key,
                             ExtraArgs={"Metadata": {DIGEST_METADATA: sha256}})


def put_bytes(url: S3Url, data: bytes) -> None:
    with storage_errors(url):
        client().put_object(Bucket=url.bucket, Key=url.key, Body=data,
                            Metadata={DIGEST_METADATA: hashlib.sha256(data).hexdigest()})


def delete(url: S3Url, names: list[str]) -> None:
    """Delete the objects `names` under the prefix `url`."""
    with storage_errors(url):
        for start in range(0, len(names), 1000):
            keys = [{"Key": url.child(name).key} for name in names[start:start + 1000]]
            client().delete_objects(Bucket=url.bucket, Delete={"Objects": keys, "Quiet": True})


def put_if(url: S3Url, data: bytes, etag: str | None = None) -> str | None:
    """Put a small object only if there is none (`etag` None: If-None-Match: *) or it
    is still the version `etag` (If-Match): its new ETag, or None when the condition
    failed (another writer came first)."""
    from botocore.exceptions import ClientError

    condition = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
    with storage_errors(url):
        try:
            return client().put_object(Bucket=url.bucket, Key=url.key, Body=data,
                                       **condition)["ETag"]
        except ClientError as err:
            code = str(err.response.get("Error", {}).get("Code"))
            if code in ("PreconditionFailed", "ConditionalRequestConflict", "412", "409"):
                return None
            raise


def read_versioned(url: S3Url) -> tuple[bytes, str] | None:
    """(bytes, ETag) of a small object, or None when there is none."""
    from botocore.exceptions import ClientError

    with storage_errors(url):
        try:
            answer = client().get_object(Bucket=url.bucket, Key=url.key)
            return answer["Body"].read(), answer["ETag"]
        except ClientError as err:
            if _missing(err):
                return None
            raise
