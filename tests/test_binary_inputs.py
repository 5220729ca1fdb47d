"""Binary inputs from elsewhere: byte order, counts that contradict the file, refusals
that name the spec field."""

import struct

from test_binary_pack import decoded, write_imu

from conftest import run


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
