"""Spec files compile to numpy dtypes; dumps are checked and read against them."""

import math
import struct
import wave
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT
from packer.errors import UsageProblem
from packer.sources.binary.dump import DumpError, examine_dump, open_dump
from packer.sources.binary.records import Windows, record_arrays, window_arrays
from packer.sources.binary.spec import SpecError, load_spec, parse_spec, shipped_spec_names

IMU_SPEC = (ROOT / "packer/sources/binary/specs/imu.toml").read_text()
ORDER = {"little": "<", "big": ">"}


def imu_record_bytes(i: int, order: str) -> bytes:
    return struct.pack(f"{ORDER[order]}Q3f3fH2x", 1_000_000 * i + 7, 0.5 * i, -1.25, 9.81 + i,
                       0.01 * i, -0.02, 3e-5 * i, i % 4)


def write_imu(path: Path, n: int, order: str = "little", declared: int | None = None,
              magic: bytes = b"IMU1", extra: bytes = b"") -> Path:
    o = ORDER[order]
    header = magic + struct.pack(f"{o}II", n if declared is None else declared, 200)
    header += bytes(64 - len(header))
    path.write_bytes(header + b"".join(imu_record_bytes(i, order) for i in range(n)) + extra)
    return path


def imu_spec(order: str = "little", **replace: str):
    text = IMU_SPEC.replace('byte_order = "little"', f'byte_order = "{order}"')
    for old, new in replace.items():
        text = text.replace(old, new)
    return parse_spec(text, "imu.toml")


def test_shipped_specs_load_and_compile():
    assert shipped_spec_names() == ["aiff", "imu", "kitti-velodyne", "mnist-idx",
                                    "mnist-idx-labels", "pcm16", "wav"]
    imu = load_spec("imu")
    assert imu.record_dtype.itemsize == 36 and imu.header_dtype.itemsize == 64
    assert imu.record_dtype.names == ("timestamp_ns", "accel", "gyro", "status")
    assert [imu.record_dtype.fields[n][1] for n in imu.record_dtype.names] == [0, 8, 20, 32]
    assert imu.record_dtype["accel"] == np.dtype(("<f4", (3,)))
    mnist = load_spec("mnist-idx")
    assert mnist.record_dtype["image"] == np.dtype(("u1", (28, 28)))
    assert mnist.header_dtype["magic"] == np.dtype(">u4")
    assert load_spec("pcm16").record_dtype == np.dtype([("sample", "<i2")])


@pytest.mark.parametrize("order", ["little", "big"])
def test_imu_records_match_struct_in_either_byte_order(order, tmp_path):
    path = write_imu(tmp_path / "imu.bin", 5, order)
    dump = open_dump(path, imu_spec(order))
    assert dump.byte_order == order and dump.count == 5
    assert dump.header == {"magic": b"IMU1", "n_records": 5, "sample_rate_hz": 200}
    records = dump.records()
    assert records.dtype.isnative
    for i in range(5):
        expected = struct.unpack(f"{ORDER[order]}Q3f3fH2x", imu_record_bytes(i, order))
        assert records["timestamp_ns"][i] == expected[0]
        assert records["accel"][i].tolist() == list(expected[1:4])
        assert records["gyro"][i].tolist() == list(expected[4:7])
        assert records["status"][i] == expected[7]


def test_little_and_big_endian_dumps_read_the_same_values(tmp_path):
    little = open_dump(write_imu(tmp_path / "le.bin", 4, "little"), imu_spec("little"))
    big = open_dump(write_imu(tmp_path / "be.bin", 4, "big"), imu_spec("big"))
    assert big.spec.record_dtype["status"] == np.dtype(">u2")
    assert little.records().tobytes() == big.records().tobytes()
    assert big.records(native=False).tobytes() != little.records(native=False).tobytes()


def test_padding_can_be_written_as_a_byte_count():
    spec = imu_spec(**{'_pad = {type = "pad2"}': "_pad = {padding = 2}"})
    assert spec.record_dtype == load_spec("imu").record_dtype
    assert spec.record.fields[-1].kind == "pad"


@pytest.mark.parametrize("change, message", [
    ({'gyro = {type = "f4", shape = [3]}': 'gyro = {type = "f4", shape = [3], offset = 12}'},
     "record.fields.gyro overlaps record.fields.accel at bytes 12..19"),
    ({'status = {type = "u2"}': 'status = {type = "float32"}'},
     "record.fields.status.type = 'float32' is not a type; use one of u1 u2 u4 u8 i1 i2 i4 "
     "i8 f2 f4 f8, i3/u3 (24-bit, read as int32/uint32), bytesN (e.g. bytes16) or padN "
     "(e.g. pad2)"),
    ({"size = 36": "size = 40"},
     "record.size = 40 but the fields end at byte 36: 4 bytes of each record are not "
     "described; add a field such as _pad = {type = \"pad4\"} or correct record.size"),
    ({"size = 36": "size = 32"}, "record.fields._pad ends at byte 36, past record.size = 32"),
    ({'byte_order = "little"': ""}, "missing key byte_order"),
    ({'byte_order = "little"': 'byte_order = "middle"'}, "byte_order = 'middle'"),
    ({'status = {type = "u2"}': 'status = {shape = [1]}'},
     "record.fields.status: missing key 'type'"),
    ({"trailing = ": "record_size = 36\ntrailing = "},
     "unknown key 'record_size' in the top level; allowed: description, byte_order"),
    ({'field = "n_records"': 'field = "n_samples"'},
     "count.field = 'n_samples' is not an integer field of the header; header integer "
     "fields: n_records, sample_rate_hz"),
    ({'expect = "IMU1"': 'expect = "IMU12"'},
     "header.fields.magic: the expected value has 5 bytes but the field has 4"),
    ({"shape = [3]}\ngyro": "shape = [0]}\ngyro"}, "record.fields.accel.shape = [0]"),
    ({"size = 64": ""}, "missing key header.size"),
    ({'sample_rate_hz = {type = "u4", offset = 8}':
      'sample_rate_hz = {type = "u4", offset = 8, expect = -1}'},
     "header.fields.sample_rate_hz.expect = -1 does not fit a u4 (0..4294967295)"),
    ({'status = {type = "u2"}': 'status = {type = "u2", expect = 3}'},
     "record.fields.status: expect is checked in the header only"),
])
def test_spec_errors_name_the_key(change, message):
    with pytest.raises(SpecError) as err:
        imu_spec(**change)
    assert str(err.value).startswith("imu.toml: ")
    assert message in str(err.value)


def test_invalid_toml_says_line_and_column(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('byte_order = "little"\n[record.fields]\nx = {type = "u4"\n')
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert str(err.value).startswith(f"{path}: not valid TOML: ")
    assert "line 3" in str(err.value) and "column" in str(err.value)


def test_a_missing_spec_lists_the_shipped_ones(tmp_path):
    shipped = "aiff, imu, kitti-velodyne, mnist-idx, mnist-idx-labels, pcm16, wav"
    with pytest.raises(UsageProblem, match=f"not a shipped spec .shipped: {shipped}"):
        load_spec(tmp_path / "nope.toml")


FILE_SIZE_SPEC = """
byte_order = "little"
[record.fields]
t = {type = "u8"}
v = {type = "f4", shape = [7]}
"""


def test_a_cut_last_record_is_reported_with_sizes_and_offsets(tmp_path):
    path = tmp_path / "imu.bin"
    path.write_bytes(bytes(10 * 36 + 28))
    spec = parse_spec(FILE_SIZE_SPEC)
    with pytest.raises(DumpError) as err:
        open_dump(path, spec)
    assert str(err.value) == (
        f"{path}: 388 bytes = 0 header + 10 records of 36 + 28 trailing bytes; record 10 "
        f"starts at offset 360 and is cut after 28 of its 36 bytes; pass --tail drop to pack "
        f"the 10 whole records")
    dropped = open_dump(path, spec, tail="drop")
    assert dropped.count == 10 and dropped.trailing == 28 and len(dropped.records()) == 10


def test_the_cut_message_uses_thousands_separators(tmp_path):
    path = tmp_path / "big.bin"
    with open(path, "wb") as file:
        file.truncate(99_999 * 36 + 28)
    with pytest.raises(DumpError, match="3,599,992 bytes = 0 header .* record 99,999 starts at "
                                        "offset 3,599,964 and is cut after 28 of its 36"):
        open_dump(path, parse_spec(FILE_SIZE_SPEC))


def test_trailing_ignore_in_the_spec_allows_trailing_bytes(tmp_path):
    path = write_imu(tmp_path / "imu.bin", 3, extra=b"footer")
    cut = r"\+ 6 trailing bytes, less than a record: .*; pass --tail drop"
    with pytest.raises(DumpError, match=cut):
        open_dump(path, imu_spec())
    dump = open_dump(path, imu_spec(**{'trailing = "error"': 'trailing = "ignore"'}))
    assert dump.count == 3 and dump.trailing == 6
    with pytest.raises(DumpError):
        open_dump(path, imu_spec(**{'trailing = "error"': 'trailing = "ignore"'}), tail="error")


def test_wrong_magic_names_offset_expected_and_found(tmp_path):
    path = write_imu(tmp_path / "imu.bin", 2, magic=b"XYZ1")
    with pytest.raises(DumpError) as err:
        open_dump(path, imu_spec())
    assert str(err.value) == (
        f"{path}: magic at offset 0: expected 49 4d 55 31 ('IMU1'), found 58 59 5a 31 ('XYZ1'); "
        f"this file does not look like what imu.toml describes")


def test_a_reversed_magic_suggests_the_byte_order(tmp_path):
    path = tmp_path / "idx"
    path.write_bytes(struct.pack("<IIII", 0x803, 1, 28, 28) + bytes(784))
    dump = examine_dump(path, load_spec("mnist-idx"))
    assert not dump.ok
    assert "expected 2051 (00 00 08 03), found 50855936 (03 08 00 00)" in dump.checks[0].message
    assert 'is byte_order = "big" right?' in dump.checks[0].message


def test_header_count_that_disagrees_with_the_size(tmp_path):
    path = write_imu(tmp_path / "imu.bin", 3, declared=5)
    with pytest.raises(DumpError) as err:
        open_dump(path, imu_spec())
    assert str(err.value) == (
        f"{path}: header.n_records says 5 records, but 172 bytes = 64 header + 3 records "
        f"of 36; the dump is cut short or the count is wrong; pass --tail drop to pack the 3 "
        f"whole records")
    assert open_dump(path, imu_spec(), tail="drop").count == 3


@pytest.mark.parametrize(("declared", "extra", "says"), [
    (8, b"", "+ 72 trailing bytes, 2 whole records more than header.n_records says: the "
             "header count disagrees with the file size"),
    (10, b"\1" * 28, "+ 28 trailing bytes, less than a record: record 10 would start at "
                     "offset 424 and is cut after 28 of its 36 bytes"),
])
def test_bytes_after_the_header_count_say_what_they_may_be(declared, extra, says, tmp_path):
    path = write_imu(tmp_path / "imu.bin", 10, declared=declared)
    path.write_bytes(path.read_bytes() + extra)
    with pytest.raises(DumpError) as err:
        open_dump(path, imu_spec())
    assert says in str(err.value) and "pass --tail drop" in str(err.value)


def test_empty_folder_and_missing_files_are_refused(tmp_path):
    (tmp_path / "empty.bin").write_bytes(b"")
    with pytest.raises(DumpError, match="empty.bin: the file is empty"):
        open_dump(tmp_path / "empty.bin", imu_spec())
    with pytest.raises(UsageProblem, match="is a folder"):
        open_dump(tmp_path, imu_spec())
    with pytest.raises(UsageProblem, match="no such file"):
        open_dump(tmp_path / "nope.bin", imu_spec())


def test_a_file_shorter_than_the_header_fails_one_check(tmp_path):
    (tmp_path / "short.bin").write_bytes(b"IMU1")
    dump = examine_dump(tmp_path / "short.bin", imu_spec())
    assert [(c.name, c.ok) for c in dump.checks] == [("header", False)]
    assert "4 bytes, shorter than the 64-byte header" in dump.checks[0].message


def test_idx_images_file_big_endian(tmp_path):
    images = np.arange(3 * 28 * 28, dtype=np.uint32).reshape(3, 28, 28) % 251
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(struct.pack(">IIII", 0x00000803, 3, 28, 28) + images.astype("u1").tobytes())
    dump = open_dump(path, load_spec("mnist-idx"))
    assert dump.header == {"magic": 2051, "n_images": 3, "rows": 28, "cols": 28}
    assert np.array_equal(dump.records()["image"], images)
    assert np.array_equal(dump.records(2, 1)["image"][0], images[2])


def write_wav(path: Path, frames: np.ndarray, channels: int = 1) -> Path:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(channels)
        out.setsampwidth(2)
        out.setframerate(8000)
        out.writeframes(frames.astype("<i2").tobytes())
    return path


def test_pcm16_wav_written_by_the_wave_module(tmp_path):
    samples = (np.sin(np.arange(1000) / 10) * 20000).astype(np.int16)
    dump = open_dump(write_wav(tmp_path / "a.wav", samples), load_spec("pcm16"))
    assert dump.count == 1000 and dump.header["sample_rate"] == 8000
    assert np.array_equal(dump.records()["sample"], samples)
    stats = dump.field_stats(chunk_bytes=300)
    assert stats["sample"]["min"] == samples.min() and stats["sample"]["max"] == samples.max()
    assert math.isclose(stats["sample"]["mean"], samples.mean())


def test_a_stereo_wav_fails_the_mono_spec_at_the_channel_count(tmp_path):
    path = write_wav(tmp_path / "s.wav", np.zeros(20, np.int16), channels=2)
    with pytest.raises(DumpError,
                       match="num_channels at offset 22: expected 1 .01 00., found 2 .02 00."):
        open_dump(path, load_spec("pcm16"))


def test_chunks_and_stats_cover_every_record(tmp_path):
    dump = open_dump(write_imu(tmp_path / "imu.bin", 50), imu_spec())
    chunks = list(dump.chunks(chunk_bytes=36 * 8))
    assert [len(c) for c in chunks] == [8] * 6 + [2]
    assert np.array_equal(np.concatenate(chunks), dump.records())
    stats = dump.field_stats(chunk_bytes=36 * 7)
    accel = dump.records()["accel"]
    assert stats["accel"]["min"] == accel.min() and stats["accel"]["max"] == accel.max()
    assert math.isclose(stats["accel"]["mean"], accel.astype(np.float64).mean())
    assert stats["timestamp_ns"]["max"] == 1_000_000 * 49 + 7


def test_records_out_of_range_are_refused(tmp_path):
    dump = open_dump(write_imu(tmp_path / "imu.bin", 4), imu_spec())
    with pytest.raises(UsageProblem, match="holds records 0..3"):
        dump.records(3, 2)


def test_record_arrays_are_plain_native_arrays_per_field(tmp_path):
    dump = open_dump(write_imu(tmp_path / "imu.bin", 6, "big"), imu_spec("big"))
    arrays = record_arrays(dump.records(), dump.spec)
    assert list(arrays) == ["timestamp_ns", "accel", "gyro", "status"]
    assert arrays["accel"].shape == (6, 3) and arrays["accel"].dtype == np.dtype("=f4")
    assert arrays["status"].dtype.isnative and arrays["status"].flags.c_contiguous
    assert arrays["accel"][2].tolist() == list(struct.unpack(">Q3f3fH2x",
                                                             imu_record_bytes(2, "big"))[1:4])
    as_float = record_arrays(dump.records(), dump.spec, as_float32=True)
    assert all(a.dtype == np.float32 for a in as_float.values())


def test_windows_count_bounds_and_uncovered_records():
    windows = Windows(records=10, size=4, stride=3)
    assert windows.count == 3
    assert [windows.bounds(i) for i in range(3)] == [(0, 4), (3, 7), (6, 10)]
    assert windows.uncovered == 0
    assert Windows(11, 4, 3).uncovered == 1 and Windows(3, 4, 1).count == 0
    with pytest.raises(IndexError):
        windows.bounds(3)
    with pytest.raises(UsageProblem):
        Windows(10, 0, 1)


def test_window_arrays_stack_windows_from_one_read(tmp_path):
    dump = open_dump(write_imu(tmp_path / "imu.bin", 12), imu_spec())
    windows = Windows(dump.count, size=4, stride=3)
    stacked = window_arrays(dump, windows, first=1, count=2)
    assert stacked["accel"].shape == (2, 4, 3) and stacked["status"].shape == (2, 4)
    every = record_arrays(dump.records(), dump.spec)
    assert np.array_equal(stacked["accel"][0], every["accel"][3:7])
    assert np.array_equal(stacked["timestamp_ns"][1], every["timestamp_ns"][6:10])
