"""`packer inspect-binary`: the hex view, the spec summary, the spec over the bytes."""

import json
import re
import struct

import pytest
from click.testing import CliRunner

from packer.cli import cli
from packer.cli.binary_commands import inspect_binary
from packer.sources.binary.dump import examine_dump
from packer.sources.binary.overlay import overlay_report
from packer.sources.binary.report import binary_report_text
from packer.sources.binary.spec import load_spec

cli.add_command(inspect_binary)


def run(*args, expect: int = 0):
    result = CliRunner().invoke(cli, ["inspect-binary", *map(str, args)],
                                catch_exceptions=False)
    assert result.exit_code == expect, result.output
    return result


def write_imu(path, n, declared=None):
    header = b"IMU1" + struct.pack("<II", n if declared is None else declared, 200)
    records = b"".join(struct.pack("<Q3f3fH2x", 1000 * i, 0.5 * i, -1.0, 9.75, 0.0, 0.25,
                                   -0.5, i % 3) for i in range(n))
    path.write_bytes(header + bytes(64 - len(header)) + records)
    return path


def test_hex_view_of_a_small_file(tmp_path):
    path = tmp_path / "tiny.bin"
    path.write_bytes(b"DEMO" + bytes(range(0x20, 0x30)) + bytes(range(20)))
    assert run(path, "--hex").output == f"""\
{path}: 40 bytes; bytes 0..39 shown (0x0..0x27)

00000000  44 45 4d 4f 20 21 22 23  24 25 26 27 28 29 2a 2b  |DEMO !"#$%&'()*+|
00000010  2c 2d 2e 2f 00 01 02 03  04 05 06 07 08 09 0a 0b  |,-./............|
00000020  0c 0d 0e 0f 10 11 12 13                           |........|

hints for writing a spec:
  strings in the first 512 bytes: 0x0 'DEMO !"#$%&\\'()*+,-./'
  record size guesses (byte autocorrelation): none (too few bytes, or no repeating pattern)
  sizes that divide what follows a header of:
      0 bytes (40 left): 2 4 5 8 10 20
     16 bytes (24 left): 2 3 4 6 8 12
     32 bytes (8 left): 2 4
"""


def test_hex_view_offset_length_and_json(tmp_path):
    path = tmp_path / "data.bin"
    path.write_bytes(bytes(range(256)) * 2)
    text = run(path, "--offset", "0x41", "--length", "5").output
    assert "00000041  41 42 43 44 45" in text and "|ABCDE|" in text
    report = json.loads(run(path, "--offset", "0x41", "--length", "5", "--json").output)
    assert report["lines"] == [{"offset": 65, "hex": "41 42 43 44 45", "ascii": "ABCDE"}]
    assert report["size"] == 512 and 256 in report["divisors"]["0"]


def test_hex_hints_guess_the_record_size_of_a_dump(tmp_path):
    path = write_imu(tmp_path / "imu.bin", 400)
    report = json.loads(run(path, "--json").output)
    best = report["stride_guesses"][0]
    assert best["size"] == 36 and {"header": 64, "records": 400} in best["fits"]
    assert report["strings"][0] == {"offset": 0, "text": "IMU1"}


def test_spec_summary_has_header_count_stats_and_checks(tmp_path):
    path = write_imu(tmp_path / "imu.bin", 10)
    text = run(path, "--spec", "imu").output
    assert "  n_records       10" in text and "records: 10; trailing bytes: 0" in text
    assert ("  ok    header.fields.magic: magic at offset 0: 49 4d 55 31 ('IMU1') as "
            "expected") in text
    assert "  ok    records: 424 bytes = 64 header + 10 records of 36 (header.n_records)" in text
    assert ["status", "u2", "32", "0", "2", "0.9"] in [line.split() for line in text.splitlines()]
    report = json.loads(run(path, "--spec", "imu", "--json").output)
    assert report["header"] == {"magic": "IMU1", "n_records": 10, "sample_rate_hz": 200}
    accel = next(f for f in report["fields"] if f["name"] == "accel")
    assert (accel["min"], accel["max"], accel["shape"]) == (-1.0, 9.75, [3])
    assert all(c["ok"] for c in report["checks"]) and report["ok"]


def test_a_failed_check_prints_fail_and_exits_1(tmp_path):
    path = write_imu(tmp_path / "imu.bin", 3, declared=4)
    text = run(path, "--spec", "imu", expect=1).output
    assert ("  FAIL  records: header.n_records says 4 records, but 172 bytes = 64 header + "
            "3 records of 36; the dump is cut short") in text
    assert "ok    records: header.n_records says 4 records" in run(
        path, "--spec", "imu", "--tail", "drop").output


def test_spec_over_the_bytes(tmp_path):
    path = write_imu(tmp_path / "imu.bin", 5)
    text = run(path, "--spec", "imu", "--hex", "--records", "2", "--record", "3").output
    lines = text.splitlines()
    assert lines[0].endswith("(little-endian); records 3..4 of 5")
    assert re.search(r"\n  0x00000000  header magic +\[49 4d 55 31\] +'IMU1'\n", text)
    assert any(line.startswith("  0x0000000c  header (not in spec)   [00 00") for line in lines)
    accel = next(line for line in lines if "record 4 accel" in line)
    assert accel.startswith("  0x000000d8  record 4 accel         [00 00 00 40 00 00 80 bf")
    assert accel.endswith("[2 -1 9.75]")
    assert any("record 4 (padding)" in line for line in lines)
    assert not any("record 2" in line or "record 5" in line for line in lines)


def test_both_orders_decode_each_multibyte_field_twice(tmp_path):
    path = write_imu(tmp_path / "imu.bin", 2)
    text = run(path, "--spec", "imu", "--hex", "--both-orders").output
    assert "little 2 | big 33554432" in text  # n_records = 2, also read big-endian
    report = json.loads(run(path, "--spec", "imu", "--hex", "--both-orders", "--json").output)
    n_records = next(r for r in report["rows"] if r["field"] == "n_records")
    assert (n_records["little"], n_records["big"]) == (2, 0x02000000)
    magic = next(r for r in report["rows"] if r["field"] == "magic")
    assert "big" not in magic and magic["value"] == "IMU1"


def test_a_wrong_magic_is_shown_over_the_bytes(tmp_path):
    path = write_imu(tmp_path / "imu.bin", 2)
    data = bytearray(path.read_bytes())
    data[0:4] = b"IMU2"
    path.write_bytes(bytes(data))
    result = run(path, "--spec", "imu", "--hex", expect=1)
    assert re.search(r"\[49 4d 55 32\] +'IMU2'  expected 49 4d 55 31\n", result.output)
    assert ("FAIL  header.fields.magic: magic at offset 0: expected 49 4d 55 31 ('IMU1')"
            in result.output)


def test_cut_bytes_at_the_end_are_shown_as_trailing(tmp_path):
    path = write_imu(tmp_path / "imu.bin", 3)
    path.write_bytes(path.read_bytes()[:-8])
    text = run(path, "--spec", "imu", "--hex", "--record", "1", expect=1).output
    assert "  0x00000088  trailing (28 bytes)    [d0 07 00 00" in text
    assert "is cut after 28 of its 36 bytes" in text


def test_piped_output_has_no_ansi_codes_and_a_terminal_gets_colours(tmp_path):
    path = write_imu(tmp_path / "imu.bin", 2)
    for args in ([], ["--spec", "imu"], ["--spec", "imu", "--hex"]):
        output = run(path, *args).output
        assert "\x1b[" not in output
    report = overlay_report(examine_dump(path, load_spec("imu")))
    plain = binary_report_text(report, color=False)
    coloured = binary_report_text(report, color=True)
    assert "legend:" in plain and "[49 4d 55 31]" in plain
    assert "\x1b[" in coloured and "[49 4d 55 31]" not in coloured


@pytest.mark.parametrize("make, args, code, message", [
    (lambda p: p.write_bytes(b""), [], 1, "the file is empty (0 bytes); nothing to read"),
    (lambda p: p.mkdir(), [], 2, "is a folder; give one binary file"),
    (lambda p: None, [], 2, "no such file"),
    (lambda p: p.write_bytes(b"x" * 10), ["--spec", "SPEC"], 1, "not valid TOML"),
    (lambda p: p.write_bytes(b"x" * 10), ["--records", "2"], 2, "need --spec"),
    (lambda p: p.write_bytes(b"x" * 10), ["--offset", "99"], 2, "has only 10 bytes"),
])
def test_bad_input_is_one_line_with_a_nonzero_exit(make, args, code, message, tmp_path):
    path = tmp_path / "input.bin"
    make(path)
    spec = tmp_path / "bad.toml"
    spec.write_text("byte_order = \n")
    result = run(path, *[str(spec) if a == "SPEC" else a for a in args], expect=code)
    assert result.output.startswith("Error: ") and message in result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_library_errors_are_one_line(tmp_path):
    path = write_imu(tmp_path / "imu.bin", 2)
    result = run(path, "--spec", "imu", "--hex", "--record", "7", expect=2)
    assert result.output == f"Error: --record 7: {path} holds 2 whole records (0..1)\n"
    result = run(path, "--spec", "imu", "--offset", "3", expect=2)
    assert result.output.startswith("Error: --offset and --length are for the hex view")
    assert "'-1': give 0 or more" in run(path, "--offset", "-1", expect=2).output


def test_help_has_an_example():
    text = run("--help").output
    assert "Example:" in text and "--both-orders" in text


def test_the_record_size_of_random_floats_is_guessed_before_its_multiples(tmp_path):
    import numpy as np

    rng = np.random.default_rng(3)
    values = rng.standard_normal((1000, 6)).astype("<f4")
    records = b"".join(struct.pack("<Q6fH2x", 5_000_000 * i, *row, i % 4)
                       for i, row in enumerate(values.tolist()))
    path = tmp_path / "imu.bin"
    path.write_bytes(b"IMU1".ljust(64, b"\0") + records)
    report = json.loads(run(path, "--hex", "--json").output)
    assert report["stride_guesses"][0]["size"] == 36


def test_a_hex_view_of_no_bytes_is_refused(tmp_path):
    path = write_imu(tmp_path / "imu.bin", 2)
    assert "give 1 or more" in run(path, "--hex", "--length", "0", expect=2).output
