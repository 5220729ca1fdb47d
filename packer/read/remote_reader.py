"""Reading runs of samples of a dataset in object storage (packer.read.remote.
RemoteParts) from whole parts in the local cache, the next ones downloaded ahead. A run
that fails on a part whose cached copy was damaged since it was checked is read again
from a copy downloaded again, once."""

from concurrent.futures import Future, ThreadPoolExecutor

from packer.errors import DatasetError
from packer.formats.webdataset import tarindex

AHEAD = 2  # parts each reading process downloads ahead of the one it reads


class RemoteReader:
    """Runs of samples of a remote dataset from whole parts in the cache.

    A part that is a file of its own is held only while a run is read from it (the
    samples are copied out), never while the DataLoader keeps this process waiting
    between batches: a worker held back by its turn in the DataLoader's round-robin
    must not keep parts that another worker needs room for. The next AHEAD parts it
    expects are downloaded in the background, one at a time, and left in the cache
    (the most recently used, so the last to be removed). A dataset whose parts share
    its files is held whole while the reader is open."""

    def __init__(self, remote):
        self.remote = remote
        self._order, self._cursor = None, 0
        self._coming: dict[int, Future] = {}
        self._pool = None
        self._shared = None  # (held files, reader) of a dataset whose parts share files

    def __getstate__(self):
        return {"remote": self.remote, "_order": None, "_cursor": 0,
                "_coming": {}, "_pool": None, "_shared": None}

    def expect(self, parts: list[int] | None) -> None:
        """The parts this process will read, in order (one per run)."""
        if parts is None:
            self._order = None
            return
        self._order = [p for i, p in enumerate(parts) if i == 0 or parts[i - 1] != p]
        self._cursor = 0

    def read(self, part: int, start: int, count: int) -> list[dict]:
        if self.remote.shared is not None:
            if self._shared is None:
                held = self.remote.hold(self.remote.shared)
                self._shared = held, self.remote.module.reader(self.remote.shared_path(held),
                                                               self.remote.manifest)
            return self._shared[1].read(part, start, count)
        self._advance(part)
        future = self._coming.pop(part, None)
        if future is not None:
            future.result()
        try:
            return self._read_held(part, start, count)
        except DatasetError:
            if not self.remote.drop_damaged(self.remote.part_files[part]):
                raise
            self.remote.part_readers.pop(part, None)  # it indexed the damaged copy
            return self._read_held(part, start, count)  # from a copy downloaded again
        finally:
            self._prefetch()

    def _read_held(self, part: int, start: int, count: int) -> list[dict]:
        held, readers = self.remote.hold(self.remote.part_files[part]), self.remote.part_readers
        try:
            if part not in readers:  # kept with its index for later epochs of this process
                readers[part] = self._local_reader(part, held)
            return readers[part].read(0, start, count)
        finally:
            if part in readers:
                readers[part].close()  # its descriptors first: then the cache may remove it
            for file in held:
                file.release()

    def _advance(self, part: int) -> None:
        """Move the cursor over the expected parts to `part`."""
        order = self._order
        if order is not None and (self._cursor >= len(order) or order[self._cursor] != part):
            try:
                self._cursor = order.index(part, self._cursor)
            except ValueError:
                pass

    def _prefetch(self) -> None:
        if not self._order:
            return
        coming = []
        for part in self._order[self._cursor + 1:]:
            if len(coming) == AHEAD:
                break
            if part not in coming and part != self._order[self._cursor]:
                coming.append(part)
        if self._pool is None:
            # One download at a time, in the expected order: the next part first.
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="packer-download")
        for part in coming:
            if part not in self._coming:
                self._coming[part] = self._pool.submit(self._download, part)

    def _download(self, part: int) -> None:
        """Into the cache (if it is not there), and let go."""
        for file in self.remote.hold(self.remote.part_files[part]):
            file.release()

    def _local_reader(self, part: int, held: list):
        remote = self.remote
        if remote.manifest is None:
            return tarindex.Reader([str(held[0].path)])
        return remote.module.reader(held[0].path.parent, remote.one_part(part)[0])

    def close(self) -> None:
        if self._shared is not None:
            held, reader = self._shared
            reader.close()
            for file in held:
                file.release()
            self._shared = None
        for future in self._coming.values():
            if not future.cancel():
                try:
                    future.result()
                except Exception:  # a failed download ahead that was never needed
                    pass
        self._coming = {}
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
