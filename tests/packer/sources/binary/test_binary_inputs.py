"""Binary inputs from elsewhere: byte order, counts that contradict the file, refusals
that name the spec field."""

import bz2
import gzip
import lzma
import struct

import numpy as np
import pytest
from dumps import decoded, write_imu

import packer
from conftest import ROOT, run


def test_a_big_endian_dump_read_little_endian_says_the_byte_order_looks_wrong(tmp_path):
    write_imu(tmp_path / "imu.bin", 300, "big")
    for extra in ([], ["--tail", "drop"]):
        out = run("pack", tmp_path / "imu.bin", "--spec", "imu", "-o", tmp_path / "o", *extra,
                  expect=1).output
        assert "the byte order looks wrong" in out
        assert 'byte_order = "little"' in out and "header.n_records (offset 4, u4)" in out
        assert "read big-endian it is 300" in out
        assert "--tail drop" not in out and "Traceback" not in out
        assert not (tmp_path / "o").exists()
    json_out = run("inspect-binary", tmp_path / "imu.bin", "--spec", "imu", expect=1).output
    assert "FAIL  records:" in json_out and "byte order looks wrong" in json_out


def test_tail_drop_refuses_a_count_off_by_orders_of_magnitude(tmp_path):
    dump = tmp_path / "imu.bin"
    write_imu(dump, 200, "little")
    data = bytearray(dump.read_bytes())
    data[4:8] = struct.pack("<I", 16_777_216)
    dump.write_bytes(bytes(data))
    out = run("pack", dump, "--spec", "imu", "--tail", "drop", "-o", tmp_path / "o",
              expect=1).output
    assert "says 16,777,216 records" in out and "off by more than 10x" in out
    assert 'count = {from = "file_size"}' in out and not (tmp_path / "o").exists()
    # a dump cut short by less than that still packs its whole records with --tail drop
    write_imu(dump, 200, "little")
    dump.write_bytes(dump.read_bytes()[:64 + 150 * 36])
    run("pack", dump, "--spec", "imu", "--tail", "drop", "-o", tmp_path / "o", "-q")
    assert len(decoded(tmp_path / "o")) == 150


def test_a_failed_expect_names_the_spec_field(tmp_path):
    import wave

    with wave.open(str(tmp_path / "stereo.wav"), "wb") as file:
        file.setnchannels(3)
        file.setsampwidth(2)
        file.setframerate(8000)
        file.writeframes(b"\0" * 60)
    out = run("pack", tmp_path / "stereo.wav", "--spec", "pcm16", "-o", tmp_path / "o",
              expect=1).output
    assert "num_channels at offset 22: expected 1 (01 00), found 3 (03 00)" in out


def write_idx_pair(folder, count: int, opener) -> tuple[np.ndarray, list[int]]:
    images = (np.arange(count * 28 * 28) % 251).astype(np.uint8).reshape(count, 28, 28)
    labels = [i * 7 % 10 for i in range(count)]
    with opener(folder / "train-images-idx3-ubyte.gz", "wb") as file:
        file.write(struct.pack(">IIII", 0x803, count, 28, 28) + images.tobytes())
    with opener(folder / "train-labels-idx1-ubyte.gz", "wb") as file:
        file.write(struct.pack(">II", 0x801, count) + bytes(labels))
    return images, labels


@pytest.mark.parametrize("fmt", ["hdf5", "webdataset"])
def test_a_gzipped_idx_pair_packs_with_the_shipped_mnist_specs(fmt, tmp_path):
    images, labels = write_idx_pair(tmp_path, 40, gzip.open)
    out = tmp_path / "mnist"
    run("pack", tmp_path / "train-images-idx3-ubyte.gz", "--spec", "mnist-idx", "--labels",
        tmp_path / "train-labels-idx1-ubyte.gz", "--label-spec", "mnist-idx-labels",
        "--to", fmt, "-o", out, "-q")
    samples = decoded(out)
    manifest = packer.load_manifest(out)
    assert manifest["source"]["compression"] == "gzip"
    assert [int(manifest["classes"][s["cls"]]) for s in samples] == labels
    assert all(np.array_equal(np.asarray(s["image.npy"]), images[i])
               for i, s in enumerate(samples))
    text = run("inspect-binary", tmp_path / "train-images-idx3-ubyte.gz", "--spec",
               "mnist-idx").output
    assert "(gzip, decompressed)" in text and "records: 40;" in text


@pytest.mark.parametrize("opener", [bz2.open, lzma.open])
def test_bz2_and_xz_dumps_are_read_as_their_contents(opener, tmp_path):
    write_imu(tmp_path / "plain.bin", 20, "little")
    with opener(tmp_path / "imu.bin.x", "wb") as file:
        file.write((tmp_path / "plain.bin").read_bytes())
    run("pack", tmp_path / "plain.bin", "--spec", "imu", "-o", tmp_path / "a", "-q")
    run("pack", tmp_path / "imu.bin.x", "--spec", "imu", "-o", tmp_path / "b", "-q")
    assert [s["accel.npy"].tolist() for s in decoded(tmp_path / "a")] == \
        [s["accel.npy"].tolist() for s in decoded(tmp_path / "b")]


def test_a_cut_gzip_dump_is_a_clear_error_and_the_copy_is_removed(tmp_path):
    from packer.compressed import PlainFile

    write_imu(tmp_path / "plain.bin", 2000, "little")
    packed = gzip.compress((tmp_path / "plain.bin").read_bytes())
    (tmp_path / "imu.bin.gz").write_bytes(packed[:len(packed) // 2])
    out = run("pack", tmp_path / "imu.bin.gz", "--spec", "imu", "-o", tmp_path / "o",
              expect=1).output
    assert "imu.bin.gz: a gzip file that cannot be decompressed after" in out
    assert "damaged or cut short" in out and "Traceback" not in out
    (tmp_path / "whole.bin.gz").write_bytes(packed)
    plain = PlainFile(tmp_path / "whole.bin.gz")
    copy = plain.path
    assert copy.name == "whole.bin" and copy.read_bytes() == (tmp_path / "plain.bin").read_bytes()
    del plain
    assert not copy.parent.exists()


def test_the_documented_spec_for_a_new_logger_reads_such_a_logger(tmp_path):

    page = (ROOT / "docs" / "binary.md").read_text()
    section = page.split("## A spec for a new logger", 1)[1]
    (tmp_path / "log2.toml").write_text(section.split("```toml\n", 1)[1].split("```", 1)[0])
    rows = [(i * 10, i, -i, 3 * i, -(2**23) + i * 1000) for i in range(50)]
    header = b"LOG2" + struct.pack(">H", 2) + bytes(10) + struct.pack(">Q", len(rows))
    body = b"".join(struct.pack(">I3h", *row[:4]) + (row[4] % 2**24).to_bytes(3, "big")
                    + bytes(7) for row in rows)
    (tmp_path / "log.bin").write_bytes(header.ljust(32, b"\0") + body)
    run("pack", tmp_path / "log.bin", "--spec", tmp_path / "log2.toml", "-o", tmp_path / "o",
        "-q")
    samples = decoded(tmp_path / "o")
    assert [int(s["ms.npy"]) for s in samples] == [r[0] for r in rows]
    assert [s["accel.npy"].tolist() for s in samples] == [list(r[1:4]) for r in rows]
    assert [int(s["pressure.npy"]) for s in samples] == [r[4] for r in rows]


def test_an_empty_compressed_dump_names_the_file_not_its_copy(tmp_path):
    (tmp_path / "imu.bin.gz").write_bytes(gzip.compress(b""))
    out = run("pack", tmp_path / "imu.bin.gz", "--spec", "imu", "-o", tmp_path / "o",
              expect=1).output
    assert f"{tmp_path / 'imu.bin.gz'} (gzip, decompressed): the contents are empty" in out
    assert "packer-plain" not in out
