"""`s3://bucket/key` URLs: what names one, and its parts."""

from dataclasses import dataclass

from packer.errors import UsageProblem

SCHEME = "s3://"


def is_s3(path) -> bool:
    """Whether `path` (a str, a Path or anything else) is an `s3://` URL."""
    return isinstance(path, str) and path.startswith(SCHEME)


@dataclass(frozen=True)
class S3Url:
    """A bucket and a key (the key of an object, or a prefix without its last `/`)."""

    bucket: str
    key: str

    def __str__(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.key}" if self.key else f"{SCHEME}{self.bucket}"

    def child(self, name: str) -> "S3Url":
        """The object `name` under this prefix."""
        return S3Url(self.bucket, f"{self.key}/{name}" if self.key else name)

    def sibling(self, name: str) -> "S3Url":
        """The object `name` beside this one (under the same prefix)."""
        folder = self.key.rpartition("/")[0]
        return S3Url(self.bucket, f"{folder}/{name}" if folder else name)

    @property
    def name(self) -> str:
        """The last part of the key: what a local copy is called."""
        return self.key.rsplit("/", 1)[-1] or self.bucket

    @property
    def prefix(self) -> str:
        """The key as a prefix of the objects under it."""
        return f"{self.key}/" if self.key else ""


def parse(url: str) -> S3Url:
    """`s3://bucket/some/prefix/` -> S3Url("bucket", "some/prefix")."""
    if not is_s3(url):
        raise UsageProblem(f"{url}: not an s3:// URL")
    bucket, _, key = url[len(SCHEME):].partition("/")
    if not bucket:
        raise UsageProblem(f"{url}: no bucket; write s3://BUCKET/PREFIX")
    return S3Url(bucket, key.strip("/"))
