"""A folder of files in object storage: `packer pack s3://bucket/prefix`.

The prefix is listed once with boto3's paginator (key, size and ETag of each object; no
request per object) into a tree of names, which the files scan walks
as it walks a folder on disk (packer/sources/files/scan.py): the same order, layout
(class "folders", a `labels.csv` at the top), skip rules and keys, so that a pack of a
prefix is the pack of the same files in a local folder. `/` separates folders; an
empty object whose key ends in `/` (a folder made in a console) is an empty folder.

The packing workers (and Ray tasks) read the objects themselves, each process with its
own client (packer/sources/files/read.py). The fingerprint of the listing takes each
object's size and ETag, so a resumed pack refuses a prefix where an object was added,
removed or rewritten since the interrupted run, as a local one refuses a changed folder.
"""

from dataclasses import dataclass
from itertools import islice
from typing import NamedTuple

from packer.errors import PackerError, UsageProblem
from packer.sources.files.labels import LABELS_NAMES
from packer.sources.files.scan import Notes, Scan, count_samples, read_labels, use_labels
from packer.sources.files.tree import FILE, is_junk
from packer.storage.url import S3Url, parse


class Listed(NamedTuple):
    size: int
    etag: str


class _Folder:
    __slots__ = ("files", "folders")

    def __init__(self):
        self.files: dict[str, Listed] = {}
        self.folders: dict[str, _Folder] = {}


class ObjectTree:
    """The objects under a prefix as folders of names, walked as a LocalTree is."""

    def __init__(self):
        self.root = _Folder()

    def add(self, rel_key: str, listed: Listed, notes: Notes) -> None:
        """Put the object `rel_key` (its key less the prefix) into the tree."""
        *folders, name = rel_key.split("/")
        if "" in folders or (not name and listed.size):
            notes.skipped.append({"path": rel_key, "reason": "an object whose key has an "
                                  "empty folder name (// or a trailing /): not a file name"})
            return
        node = self.root
        for folder in folders:
            node = node.folders.setdefault(folder, _Folder())
        if name:
            node.files[name] = listed

    def top(self) -> _Folder:
        return self.root

    def entries(self, node: _Folder, rel: str, notes: Notes) -> list:
        entries = [(name, (FILE, None)) for name in node.files]
        entries += [(name, (None, sub)) for name, sub in node.folders.items()]
        return sorted(entries, key=lambda entry: entry[0])

    def kind(self, node: _Folder, entry: tuple, rel_path: str, notes: Notes):
        return entry[0] or entry[1]

    def top_names(self, exclude: set[str]) -> tuple[list[str], list[str]]:
        def kept(names):
            return sorted(n for n in names if not is_junk(n) and n not in exclude)

        return kept(self.root.folders), kept(self.root.files)

    def listed(self, rel_path: str) -> Listed | None:
        *folders, name = rel_path.split("/")
        node = self.root
        for folder in folders:
            node = node.folders.get(folder)
            if node is None:
                return None
        return node.files.get(name)

    def has_file(self, rel_path: str) -> bool:
        return self.listed(rel_path) is not None

    def __bool__(self) -> bool:
        return bool(self.root.files or self.root.folders)


@dataclass
class ObjectScan(Scan):
    """A prefix of objects, scanned: `root` is its S3Url, `tree` its ObjectTree."""

    @property
    def path(self) -> str:
        return str(self.root)

    def where(self) -> str:
        return str(self.root)

    def jobs(self, start: int, size: int, check: str):
        """As `Scan.jobs`, each with the listed size and ETag of its objects, which
        `read_object_job` checks them against."""
        runs = islice(self.samples(), start, None)
        while run := list(islice(runs, size)):
            listed = {rel: self.tree.listed(rel) for s in run for _, rel in s.files}
            yield str(self.root), check, [(s.key, s.files, s.label) for s in run], listed

    def fingerprinted(self, sample) -> tuple:
        """With the size and ETag of each object: an object rewritten in place changes
        the fingerprint (LastModified, to the second only, could not tell every one)."""
        return sample.files, sample.label, [self.tree.listed(rel) for _, rel in sample.files]

    def modified_since(self, time_ns: int, count: int) -> None:
        return None  # an object rewritten since has another ETag: another fingerprint


def scan_prefix(url_text: str, options) -> ObjectScan:
    """List the prefix, decide its layout and labels, count its samples."""
    url = parse(url_text)
    notes = Notes()
    tree = list_prefix(url, notes)
    scan = ObjectScan(url, options.group_by_stem, options.follow_symlinks, notes=notes,
                      tree=tree)
    labels, encoding = options.labels, options.encoding
    in_folder = labels is None and not options.unlabelled and next(
        (name for name in LABELS_NAMES if tree.has_file(name)), None)
    if in_folder:
        from packer.storage.client import read_bytes

        where = url.child(in_folder)
        data = read_bytes(where)
        if data is None:
            raise PackerError(f"{where}: deleted while the prefix was being scanned; run "
                              "the same command again")
        use_labels(scan, read_labels(where, tree.has_file, encoding, True, data), str(where),
                   True, in_folder)
    elif labels is not None:
        use_labels(scan, read_labels(labels, tree.has_file, encoding, False), str(labels),
                   False, None)
    return count_samples(scan, folders_layout=labels is None and not options.unlabelled)


def list_prefix(url: S3Url, notes: Notes) -> ObjectTree:
    """The tree of the objects under `url`; a clear error when there are none."""
    from packer.storage.client import check_bucket, list_objects

    tree = ObjectTree()
    for rel_key, (size, etag) in list_objects(url).items():
        tree.add(rel_key, Listed(size, etag), notes)
    if tree or notes.skipped:
        return tree
    check_bucket(url)
    raise UsageProblem(f"{url}: no objects under this prefix; check the bucket and the "
                       f"prefix (aws s3 ls {url}/)")
