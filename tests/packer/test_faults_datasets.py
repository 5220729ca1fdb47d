"""Damaged and edited datasets: every command ends in one clear message and a non-zero
exit, never a traceback, a signal, or a wrong count with status 0."""

import io
import json
import os
import subprocess
import sys
import tarfile

import h5py
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import packer
from conftest import image_bytes, tmpfs
from packer.cli import cli
from packer.errors import DatasetError
from packer.formats import FORMAT_NAMES


@pytest.fixture(scope="module")
def packed(packed_images):
    """The same 60 images packed into every format; a test damages a copy (copy_of)."""
    return packed_images((20, 20, 20))


def copy_of(packed, fmt, tmp_path):
    target = tmp_path / fmt
    subprocess.run(["cp", "-r", str(packed[fmt, "jpg"]), str(target)], check=True)
    return target


def read_manifest(dataset) -> dict:
    if dataset.is_file():  # HDF5 as one file: the manifest is an attribute
        with h5py.File(dataset, "r") as file:
            return json.loads(file.attrs["packer_manifest"])
    return json.loads((dataset / "manifest.json").read_text())


def write_manifest(dataset, manifest) -> None:
    if dataset.is_file():
        with h5py.File(dataset, "r+") as file:
            file.attrs["packer_manifest"] = json.dumps(manifest)
    else:
        (dataset / "manifest.json").write_text(json.dumps(manifest))


def edit_manifest(dataset, change):
    manifest = read_manifest(dataset)
    change(manifest)
    write_manifest(dataset, manifest)


def cli_run(*args):
    """The CLI in a fresh process, so that a signal or a traceback is seen as one."""
    return subprocess.run([sys.executable, "-m", "packer", *map(str, args)],
                          capture_output=True, text=True, timeout=60)


def assert_clean_failure(result, *expected):
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    for text in expected:
        assert text in result.stdout + result.stderr


def test_a_damaged_tar_header_mid_shard_stops_unpack_naming_shard_and_offset(packed,
                                                                             tmp_path):
    dataset = copy_of(packed, "webdataset", tmp_path)
    shard = dataset / "shard-000000.tar"
    with tarfile.open(shard) as tar:
        offset = tar.getmembers()[30].offset
    data = bytearray(shard.read_bytes())
    data[offset + 3] ^= 0xFF
    shard.write_bytes(bytes(data))
    result = cli_run("unpack", dataset, "-o", tmp_path / "out", "-q")
    assert_clean_failure(result, "shard-000000.tar", f"byte offset {offset:,}")
    assert not (tmp_path / "out").exists()


def test_a_non_octal_size_field_with_a_good_checksum_is_named(packed, tmp_path):
    dataset = copy_of(packed, "webdataset", tmp_path)
    shard = dataset / "shard-000000.tar"
    data = bytearray(shard.read_bytes())
    data[124:136] = b"9999999999\0\0"
    total = sum(data[:148]) + 8 * 32 + sum(data[156:512])
    data[148:156] = b"%06o\0 " % total
    shard.write_bytes(bytes(data))
    assert_clean_failure(cli_run("unpack", dataset, "-o", tmp_path / "out", "-q"),
                         "byte offset 0", "not an octal number")
    assert_clean_failure(cli_run("verify", dataset, "-q"), "not an octal number")


def test_a_class_member_that_is_not_a_number_names_shard_and_offset(tmp_path):
    shard = tmp_path / "foreign.tar"
    with tarfile.open(shard, "w") as tar:
        for name, data in [("a.jpg", image_bytes(0)), ("a.cls", b"cat")]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    dataset = tmp_path / "ds"
    dataset.mkdir()
    (dataset / "shard-000000.tar").write_bytes(shard.read_bytes())
    manifest = {"format": "webdataset", "layout_version": 2, "count": 1, "tool": "packer",
                "created": "2026-12-01T00:00:00+00:00",
                "fields": {"jpg": {"dtype": "bytes", "count": 1, "bytes": 1},
                           "cls": {"dtype": "int64", "count": 1, "bytes": 0}},
                "classes": None, "parts": [{"index": 0, "first": 0, "count": 1,
                                            "bytes": shard.stat().st_size,
                                            "name": "shard-000000.tar", "sha256": "0" * 64}],
                "source": {"kind": "files", "path": "x", "labels": "none"},
                "skipped": [], "ignored": [], "options": {}}
    (dataset / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DatasetError, match=r"shard-000000.tar: the member at byte offset "
                                           r"\d[\d,]* holds b'cat', not a class id"):
        list(packer.open_dataset(dataset, decode="raw"))


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_a_count_edited_in_the_manifest_is_refused(packed, fmt, tmp_path):
    dataset = copy_of(packed, fmt, tmp_path)

    def fewer(manifest):
        manifest["count"] -= 1
        manifest["parts"][-1]["count"] -= 1

    edit_manifest(dataset, fewer)
    with pytest.raises(DatasetError, match="59"):
        packer.open_dataset(dataset)
    assert_clean_failure(cli_run("unpack", dataset, "-o", tmp_path / "out", "-q"), "59")
    assert not (tmp_path / "out").exists()


def test_a_truncated_data_mdb_is_an_error_not_a_bus_error(packed, tmp_path):
    dataset = copy_of(packed, "lmdb", tmp_path)
    data = dataset / "data.mdb"
    os.truncate(data, data.stat().st_size // 2)
    for command in (["verify", dataset], ["unpack", dataset, "-o", tmp_path / "out"],
                    ["bench", dataset, "--workers", "0", "--repeat", "1"]):
        assert_clean_failure(cli_run(*command, "-q"), "data.mdb", "truncated")
    probe = subprocess.run([sys.executable, "-c",
                            f"import packer; packer.open_dataset({str(dataset)!r})"],
                           capture_output=True, text=True)
    assert probe.returncode == 1 and "truncated" in probe.stderr  # an exception, no SIGBUS


def test_a_missing_data_mdb_is_named(packed, tmp_path):
    dataset = copy_of(packed, "lmdb", tmp_path)
    (dataset / "data.mdb").unlink()
    assert_clean_failure(cli_run("verify", dataset, "-q"), "data.mdb: missing")


@pytest.mark.parametrize("fmt", ["webdataset", "tfrecord"])
def test_a_deleted_part_file_is_named_by_every_command(packed, fmt, tmp_path):
    dataset = copy_of(packed, fmt, tmp_path)
    part = dataset / read_manifest(dataset)["parts"][0]["name"]
    part.unlink()
    for command in (["verify", dataset], ["unpack", dataset, "-o", tmp_path / "out"],
                    ["bench", dataset]):
        assert_clean_failure(cli_run(*command, "-q"), f"{part}: missing")
    with pytest.raises(DatasetError, match="missing"):
        packer.open_dataset(dataset)
    trained = subprocess.run([sys.executable, "-m", "train", "fit", str(dataset), "--out",
                              str(tmp_path / "run")], capture_output=True, text=True)
    assert_clean_failure(trained, f"{part}: missing")


@pytest.fixture
def read_only_folder(tmp_path):
    """A read-only file system (root can mount one; elsewhere the test is skipped)."""
    with tmpfs(tmp_path / "ro", "ro,size=1m") as mount:
        yield mount


def test_an_output_on_a_read_only_file_system_is_one_message(packed, read_only_folder):
    for command in (["pack", packed["images"], "-o", read_only_folder / "x"],
                    ["unpack", packed["webdataset", "jpg"], "-o", read_only_folder / "x"]):
        assert_clean_failure(cli_run(*command, "-q"), str(read_only_folder / "x"),
                             "Read-only file system")
    trained = subprocess.run([sys.executable, "-m", "train", "fit",
                              str(packed["webdataset", "jpg"]), "--out",
                              str(read_only_folder / "run"), "--epochs", "1"],
                             capture_output=True, text=True)
    assert_clean_failure(trained, f"{read_only_folder / 'run'}: Read-only file system")


def test_a_zeroed_heap_object_in_hdf5_is_named_not_a_hang(packed, tmp_path):
    """libhdf5 walks a heap of image bytes by its objects' sizes: one zeroed made
    verify and unpack loop forever."""
    from packer.formats.hdf5.heaps import _heap_addresses

    dataset = copy_of(packed, "hdf5", tmp_path)
    with h5py.File(dataset, "r") as file:
        heap = min(_heap_addresses(dataset, file["jpg"]))
    with open(dataset, "r+b") as file:
        file.seek(heap + 16)  # the first object's header: index 0, size 0
        file.write(bytes(16))
    for command in (["verify", dataset], ["unpack", dataset, "-o", tmp_path / "out"]):
        assert_clean_failure(cli_run(*command, "-q"), f"heap of variable-length rows at byte "
                                                      f"offset {heap:,} is damaged")


def test_a_zeroed_heap_object_where_the_manifest_lies_is_named_not_a_hang(packed, tmp_path):
    """The manifest attribute is a variable-length string, written last: it lies in a
    heap of image bytes, whose walk hung inspect (and every reader) before the manifest
    was read. Run apart, so that a hang fails the test."""
    from packer.formats.hdf5.heaps import _heap_addresses

    dataset = copy_of(packed, "hdf5", tmp_path)
    with h5py.File(dataset, "r") as file:
        heaps = sorted(_heap_addresses(dataset, file["jpg"]))
    where = dataset.read_bytes().find(b'{"format"')
    heap = max(address for address in heaps if address < where)
    with open(dataset, "r+b") as file:
        file.seek(heap + 16)
        file.write(bytes(16))
    for command in (["inspect", dataset], ["verify", dataset]):
        done = subprocess.run([sys.executable, "-m", "packer", *map(str, command)],
                              capture_output=True, text=True, timeout=120)
        assert_clean_failure(done, f"heap of variable-length rows at byte offset {heap:,} "
                                   "is damaged")


def test_a_zeroed_heap_object_stops_the_loader_with_its_name_not_a_hang(packed, tmp_path):
    """open_dataset and its DataLoader workers read the same heaps: they are checked
    when the reader opens the file. Run apart, so that a hang fails the test."""
    from packer.formats.hdf5.heaps import _heap_addresses

    dataset = copy_of(packed, "hdf5", tmp_path)
    with h5py.File(dataset, "r") as file:
        heap = min(_heap_addresses(dataset, file["jpg"]))
    with open(dataset, "r+b") as file:
        file.seek(heap + 16)
        file.write(bytes(16))
    script = ("import packer\n"
              "try:\n"
              f"    ds = packer.open_dataset({str(dataset)!r}, image_size=16)\n"
              "    for _ in packer.DataLoader(ds, batch_size=16, num_workers=2): pass\n"
              "except packer.errors.DatasetError as err:\n"
              "    print(err)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert f"heap of variable-length rows at byte offset {heap:,} is damaged" in done.stdout, (
        done.stdout + done.stderr[-2000:])


def test_damaged_hdf5_data_read_by_the_loader_is_named(packed, tmp_path):
    dataset = copy_of(packed, "hdf5", tmp_path)
    data = bytearray(dataset.read_bytes())
    heap = data.index(b"GCOL")  # the image bytes' heap: its first object claims 1 TB
    data[heap + 24:heap + 32] = (1 << 40).to_bytes(8, "little")
    dataset.write_bytes(data)
    with pytest.raises(DatasetError, match=f"{dataset}: the heap of variable-length rows"):
        ds = packer.open_dataset(dataset, image_size=16, on_error="skip")
        for _ in packer.DataLoader(ds, batch_size=16):
            pass


@pytest.mark.parametrize("damage", ["value", "unused byte", "page"])
def test_damaged_lmdb_values_and_pages_are_named(packed, damage, tmp_path):
    from packer.formats.lmdb import encode

    dataset = copy_of(packed, "lmdb", tmp_path)
    data = bytearray((dataset / "data.mdb").read_bytes())
    sample = next(packer.iter_samples(packed["lmdb", "jpg"]))
    if damage == "value":  # a map whose key is a number: msgpack refuses it
        at = data.index(b"".join(encode(sample)))
        data[at:at + 3] = b"\x81\x01\x02"
        expected = "the value under key 0000000000 is damaged"  # the first sample's
    elif damage == "unused byte":  # 0xc1, which msgpack never writes: an error without text
        at = data.index(b"".join(encode(sample)))
        data[at + 1] = 0xC1
        expected = "0000000000 is damaged (it does not decode: FormatError)"
    else:  # the first page after the two meta pages
        data[2 * 4096:3 * 4096] = bytes(4096)
        expected = "data.mdb"
    (dataset / "data.mdb").write_bytes(bytes(data))
    for command in (["verify", dataset], ["unpack", dataset, "-o", tmp_path / "out"]):
        assert_clean_failure(cli_run(*command, "-q"), expected)


DAMAGED_MANIFESTS = {
    "no parts": lambda m: m.pop("parts"),
    "no format": lambda m: m.pop("format"),
    "no count": lambda m: m.pop("count"),
    "count as text": lambda m: m.update(count="60"),
    "parts not a list": lambda m: m.update(parts={"0": 1}),
    "class count mismatch": lambda m: m.update(class_counts=[20, 20]),
    "part outside the folder": lambda m: m["parts"][0].update(name="../../etc/passwd"),
    "part with an absolute path": lambda m: m["parts"][0].update(name="/etc/passwd"),
    "parts that do not add up": lambda m: m["parts"][0].update(count=7),
    "fields not a mapping": lambda m: m.update(fields=["jpg"]),
    "a skipped entry without reason": lambda m: m["skipped"].append({"path": "x"}),
}


@pytest.mark.parametrize("damage", DAMAGED_MANIFESTS.values(), ids=DAMAGED_MANIFESTS.keys())
def test_a_damaged_manifest_is_one_clear_message_in_every_command(packed, damage, tmp_path):
    dataset = copy_of(packed, "webdataset", tmp_path)
    edit_manifest(dataset, damage)
    for command in (["inspect"], ["verify"], ["unpack", "-o", tmp_path / "out"]):
        result = CliRunner().invoke(cli, [command[0], str(dataset), *map(str, command[1:])])
        assert result.exit_code == 1, (command, result.output)
        assert isinstance(result.exception, SystemExit), result.exception
        assert "manifest is damaged" in result.output
    with pytest.raises(DatasetError, match="manifest is damaged"):
        packer.open_dataset(dataset)


_JSON = st.recursive(st.none() | st.booleans() | st.integers(-5, 10**6) | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6)


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*prefix, index))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_manifests_never_give_a_traceback(packed, data, tmp_path_factory):
    fmt = data.draw(st.sampled_from(FORMAT_NAMES))
    manifest = read_manifest(packed[fmt, "jpg"])
    manifest["skipped"] = manifest["skipped"][:2]
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from([p for p in _paths(manifest) if p]))
        parent = manifest
        for step in path[:-1]:
            parent = parent[step]
        if data.draw(st.booleans()) and isinstance(parent, dict):
            parent.pop(path[-1])
        else:
            parent[path[-1]] = data.draw(_JSON)
        if not isinstance(manifest, dict):
            break
    dataset = tmp_path_factory.mktemp("fuzz") / fmt
    subprocess.run(["cp", "-r", str(packed[fmt, "jpg"]), str(dataset)], check=True)
    write_manifest(dataset, manifest)
    for command in ("inspect", "verify"):
        result = CliRunner().invoke(cli, [command, str(dataset), "-q"] if command == "verify"
                                    else [command, str(dataset)])
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            command, manifest, repr(result.exception))
        assert result.exit_code in (0, 1, 2), (command, result.output)
        if result.exit_code == 0 and command == "verify":
            assert "OK" in result.output


def test_every_written_manifest_matches_the_schema_and_its_digest(packed):
    from packer.formats.manifests import _validator
    from packer.manifest import DIGEST_KEY, _digest

    for fmt in FORMAT_NAMES:
        manifest = read_manifest(packed[fmt, "jpg"])
        assert manifest[DIGEST_KEY] == _digest(manifest)  # so loading skips the schema
        _validator().validate(manifest)


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_a_manifest_with_two_class_names_swapped_fails_verify(packed, fmt, tmp_path):
    dataset = copy_of(packed, fmt, tmp_path)

    def swap(manifest):
        manifest["classes"][0], manifest["classes"][1] = (manifest["classes"][1],
                                                          manifest["classes"][0])

    edit_manifest(dataset, swap)
    result = cli_run("verify", dataset)
    assert_clean_failure(result, "the manifest differs from what the pack wrote")
