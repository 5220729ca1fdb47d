"""TFRecord parts: round trips, the `tfrecord` package as an independent reader, damaged
and cut records located by file and byte offset, verify, unpack and the loader."""

import json
import struct
from collections import Counter

import numpy as np
import pandas as pd
import pytest
from tfrecord import example_pb2
from tfrecord.reader import tfrecord_loader
from tfrecord.writer import TFRecordWriter

import packer
from conftest import run, source_files
from packer.errors import DatasetError
from packer.formats.tfrecord import TFRecordError, codec
from packer.read.dataset import iter_samples
from packer.sample import restored_path


# Not conftest's packed_images: these tests need the awkward names and sidecar files of
# image_folder, and most of them damage the dataset they are given, so each gets its own.
@pytest.fixture
def packed(image_folder, tmp_path):
    out = tmp_path / "tfr"
    run("pack", image_folder, "--to", "tfrecord", "-o", out, "--max-count", "8", "-q")
    return out


def manifest_of(out) -> dict:
    return json.loads((out / "manifest.json").read_text())


def index_lines(part) -> list[tuple[int, int]]:
    lines = part.with_suffix(".tfindex").read_text().split("\n")
    return [tuple(map(int, line.split())) for line in lines if line]


def test_images_round_trip_in_size_bounded_parts(image_folder, packed, tmp_path):
    manifest = manifest_of(packed)
    counts = [p["count"] for p in manifest["parts"]]
    assert counts == [8] * (manifest["count"] // 8) + [manifest["count"] % 8]
    assert manifest["classes"] == ["bird", "cat", "dog"]
    source = source_files(image_folder)
    for sample in iter_samples(packed):
        files = {k: v for k, v in sample.items() if k not in ("__key__", "cls")}
        for field, data in files.items():
            path = restored_path(sample["__key__"], field)
            assert source.pop(path) == data
            assert manifest["classes"][sample["cls"]] == path.split("/")[0]
    assert source == {}  # every file, bit for bit
    for part in manifest["parts"]:
        path = packed / part["name"]
        assert path.stat().st_size == part["bytes"] == sum(s for _, s in index_lines(path))
    small = tmp_path / "small"
    run("pack", image_folder, "--to", "tfrecord", "-o", small, "--shard-size", "12KB", "-q")
    parts = sorted(small.glob("*.tfrecord"))
    assert len(parts) > 1 and max(p.stat().st_size for p in parts) <= 12000
    for part, following in zip(parts, parts[1:], strict=False):  # closed only when full
        assert part.stat().st_size + index_lines(following)[0][1] > 12000


def test_parts_are_byte_identical_for_any_worker_count(image_folder, packed, tmp_path):
    run("pack", image_folder, "--to", "tfrecord", "-o", tmp_path / "j2", "--max-count", "8",
        "-j", "2", "-q")
    files = sorted(p.name for p in packed.glob("part-*"))
    assert len(files) == 3 * len(manifest_of(packed)["parts"])  # .tfrecord, .tfindex, .tfkeys
    assert all((packed / n).read_bytes() == (tmp_path / "j2" / n).read_bytes() for n in files)


def test_the_tfrecord_package_reads_every_record(packed):
    manifest, seen = manifest_of(packed), []
    for part in manifest["parts"]:
        path = packed / part["name"]
        records = list(tfrecord_loader(str(path), str(path.with_suffix(".tfindex")),
                                       shard=(0, 1)))
        assert len(records) == part["count"]
        seen += records
    ours = list(iter_samples(packed))
    assert [r["__key__"].decode() for r in seen] == [s["__key__"] for s in ours]
    for record, sample in zip(seen, ours, strict=True):
        assert int(record["cls"][0]) == sample["cls"]
        assert {k: v for k, v in record.items() if k not in ("__key__", "cls")} == {
            k: v for k, v in sample.items() if k not in ("__key__", "cls")}


def test_a_table_is_stored_as_float_features(tmp_path):
    rng = np.random.default_rng(1)
    df = pd.DataFrame({"a": rng.normal(size=25), "b": rng.integers(0, 9, 25),
                       "y": rng.choice(["no", "yes"], 25)})
    df.to_csv(tmp_path / "t.csv", index=False)
    for fmt in ("webdataset", "tfrecord"):
        run("pack", tmp_path / "t.csv", "--to", fmt, "--label-column", "y", "-o",
            tmp_path / fmt, "-q")
    wds = packer.open_dataset(tmp_path / "webdataset", decode="raw")
    tfr = packer.open_dataset(tmp_path / "tfrecord", decode="raw")
    for a, b in zip(wds, tfr, strict=True):
        assert a["__key__"] == b["__key__"] and a["cls"] == b["cls"]
        assert b["npy"].dtype == a["npy"].dtype and b["npy"].shape == (2,)
        assert np.array_equal(a["npy"].numpy(), b["npy"].numpy())
    part = tmp_path / "tfrecord" / "part-000000.tfrecord"
    record = next(tfrecord_loader(str(part), None))
    assert record["npy"].dtype == np.float32  # a float_list, as TensorFlow would parse it
    assert np.array_equal(record["npy"], df.loc[0, ["a", "b"]].to_numpy(np.float32))
    assert "OK" in run("verify", tmp_path / "tfrecord", "-q").output


def test_records_decode_as_protobuf_parses_them():
    sample = {"__key__": "a/ü b", "big": bytes(range(256)) * 300, "empty": b"", "cls": 7,
              "neg": -3, "npy": np.linspace(0, 1, 40, dtype=np.float32).reshape(5, 8)}
    record = b"".join(codec.encode_record(sample))
    example = example_pb2.Example()
    example.ParseFromString(record[12:-4])
    parsed = {}
    for name, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        parsed[name] = (kind, list(getattr(feature, kind).value))
    ours = codec.decode_example(record, 12, len(record) - 4)
    assert parsed == {"__key__": ("bytes_list", ["a/ü b".encode()]),
                      "big": ("bytes_list", [sample["big"]]), "empty": ("bytes_list", [b""]),
                      "cls": ("int64_list", [7]), "neg": ("int64_list", [-3]),
                      "npy": ("float_list", sample["npy"].ravel().tolist())}
    kinds = {codec.BYTES_LIST: "bytes_list", codec.INT64_LIST: "int64_list",
             codec.FLOAT_LIST: "float_list"}
    assert {name: (kinds[kind], np.frombuffer(b"".join(values), "<f4").tolist()
                   if kind == codec.FLOAT_LIST else values)
            for name, (kind, values) in ours.items()} == parsed


def test_records_of_another_writer_decode(tmp_path):
    """Records written with the protobuf runtime (the tfrecord package's writer), with
    lists of several values, read by the hand-written codec."""
    path = tmp_path / "other.tfrecord"
    writer = TFRecordWriter(str(path))
    writer.write({"__key__": (b"k0", "byte"), "ids": ([3, -7, 1 << 40], "int"),
                  "xs": ([0.5, -2.0], "float"), "parts": ([b"a", b"", b"bc"], "byte")})
    writer.close()
    data = path.read_bytes()
    (length,) = struct.unpack_from("<Q", data)
    assert codec.masked_crc(data[:8]) == struct.unpack_from("<I", data, 8)[0]
    assert codec.masked_crc(data[12:12 + length]) == struct.unpack_from("<I", data,
                                                                        12 + length)[0]
    features = codec.decode_example(data, 12, 12 + length)
    assert features["ids"] == (codec.INT64_LIST, [3, -7, 1 << 40])
    assert features["parts"] == (codec.BYTES_LIST, [b"a", b"", b"bc"])
    assert np.frombuffer(b"".join(features["xs"][1]), "<f4").tolist() == [0.5, -2.0]


def test_unpacked_repeated_fields_and_unknown_fields_decode():
    def field(number, wire, payload):
        return codec.varint(number << 3 | wire) + (
            codec.varint(len(payload)) + payload if wire == 2 else payload)

    ints = field(1, 0, codec.varint(5)) + field(1, 0, codec.varint((-1) & (1 << 64) - 1))
    floats = field(1, 5, struct.pack("<f", 1.5)) + field(1, 5, struct.pack("<f", 3.0))
    entries = b"".join(field(1, 2, field(2, 2, field(kind, 2, body)) + field(1, 2, name))
                       for name, kind, body in [(b"i", 3, ints), (b"f", 2, floats)])
    example = field(1, 2, entries) + field(9, 0, codec.varint(1))  # an unknown field
    features = codec.decode_example(example, 0, len(example))
    assert features["i"] == (codec.INT64_LIST, [5, -1])
    assert np.frombuffer(b"".join(features["f"][1]), "<f4").tolist() == [1.5, 3.0]
    example_pb = example_pb2.Example()
    example_pb.ParseFromString(example)  # the same bytes, as protobuf reads them
    assert list(example_pb.features.feature["i"].int64_list.value) == [5, -1]


def test_a_flipped_byte_is_reported_with_file_and_offset(packed):
    part = packed / "part-000000.tfrecord"
    offset, size = index_lines(part)[3]
    data = bytearray(part.read_bytes())
    data[offset + size - 10] ^= 0x01
    part.write_bytes(bytes(data))
    with pytest.raises(TFRecordError) as error:
        list(iter_samples(packed))
    assert str(error.value) == (f"{part}: the record at byte offset {offset:,}: its data do "
                                "not match their CRC-32C (the file is damaged there); restore "
                                "the part from a copy or pack again")
    data[offset + size - 10] ^= 0x01
    data[offset + 2] ^= 0x01  # the length
    part.write_bytes(bytes(data))
    with pytest.raises(TFRecordError, match=f"offset {offset:,}: its length does not match"):
        packer.open_dataset(packed, decode="raw").source.reader().read(0, 0, 10)


def test_a_truncated_part_names_the_cut_record(packed):
    part = packed / "part-000001.tfrecord"
    offset, size = index_lines(part)[5]
    part.write_bytes(part.read_bytes()[:offset + size // 2])
    with pytest.raises(DatasetError) as error:
        list(iter_samples(packed))
    assert str(error.value) == (f"{part}: truncated: the file ends at byte "
                                f"{offset + size // 2:,}, inside record 5, which starts at "
                                f"byte offset {offset:,}; restore the part from a copy or "
                                "pack again")
    report = json.loads(run("verify", packed, "--json", "-q", expect=1).output)
    assert any("part-000001.tfrecord: unreadable after sample" in p and "the 5 read before"
               in p for p in report["problems"])


def test_verify_passes_then_finds_damage_in_a_part_and_in_an_index(image_folder, packed):
    count = manifest_of(packed)["count"]
    assert f"OK: {count} samples" in run("verify", packed, "--against", image_folder,
                                         "-q").output
    part = packed / "part-000002.tfrecord"
    original = part.read_bytes()
    data = bytearray(original)
    data[len(data) // 2] ^= 0xFF
    part.write_bytes(bytes(data))
    output = run("verify", packed, "-q", expect=1).output
    assert "FAILED" in output and "part-000002.tfrecord: the record at byte offset" in output
    assert "do not match their CRC-32C" in output and "sha256" in output
    part.write_bytes(original)
    index = packed / "part-000003.tfindex"
    lines = index.read_text().splitlines()
    index.write_text("\n".join(lines[:-1]) + "\n")
    output = run("verify", packed, "-q", expect=1).output
    assert f"part-000003.tfindex: lists {len(lines) - 1} records, the manifest says" in output
    start, size = map(int, lines[-1].split())
    index.write_text("\n".join(lines[:-1]) + f"\n{start + 1} {size}\n")
    output = run("verify", packed, "-q", expect=1).output
    assert f"part-000003.tfindex: line {len(lines)} does not give the next record" in output


def test_unpack_restores_the_files(image_folder, packed, tmp_path):
    run("unpack", packed, "-o", tmp_path / "back", "-q")
    assert source_files(tmp_path / "back") == source_files(image_folder)


def test_the_loader_reads_every_sample_once_per_epoch_with_workers(packed):
    keys = [s["__key__"] for s in iter_samples(packed)]
    dataset = packer.open_dataset(packed, shuffle=True, seed=1, decode="raw")
    loader = packer.DataLoader(dataset, batch_size=4, num_workers=2, collate_fn=list)
    orders = []
    for epoch in range(2):
        dataset.set_epoch(epoch)
        orders.append([s["__key__"] for batch in loader for s in batch])
        assert Counter(orders[-1]) == Counter(keys) and len(orders[-1]) == len(dataset)
    assert orders[0] != orders[1] != keys  # shuffled, anew each epoch


def test_a_part_without_its_file_or_digest_is_refused_at_load(packed):
    written = (packed / "manifest.json").read_text()
    for missing in ("name", "sha256"):
        manifest = json.loads(written)
        del manifest["parts"][1][missing]
        (packed / "manifest.json").write_text(json.dumps(manifest))
        with pytest.raises(DatasetError, match=f"part 1 has no '{missing}'"):
            packer.load_manifest(packed)
