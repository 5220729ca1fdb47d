"""`packer pack` refuses options its source would ignore, and says what changed when
it refuses a --resume."""

import json
import re

import click
import pandas as pd
import pytest

import packer
from conftest import run
from packer.cli import pack
from packer.packing import writing
from packer.packing.options import EVERY_PACK, pack_option_table


def refused(*args) -> str:
    output = run("pack", *args, expect=2).output
    assert output.startswith("Error: these options do not apply to ")
    assert "\n" not in output.strip()  # one paragraph
    return output


def given_in(message: str) -> set[str]:
    """The options a refusal names (not those in its "(only for ...)" notes)."""
    return set(re.findall(r"--[a-z-]+(?=,| \()", message))


def test_every_pack_option_is_in_the_table_or_applies_to_every_pack():
    names = {param.name for param in pack.params if isinstance(param, click.Option)}
    assert names == EVERY_PACK | set(pack_option_table())
    assert not EVERY_PACK & set(pack_option_table())


def test_table_and_dump_options_given_for_a_folder(image_folder, tmp_path):
    out = tmp_path / "q5"
    message = refused(image_folder, "-o", out, "--label-column", "y", "--sheet", "S", "--na",
                      "mean", "--max-count", "3", "--window", "5", "--to", "lmdb")
    assert "taken for a folder of files:" in message
    assert "--label-column, --na (only for tables)" in message
    assert "--sheet (only for Excel workbooks)" in message
    assert "--window (only for binary dumps with --spec)" in message
    assert "--max-count (only for --to webdataset or --to tfrecord)" in message
    assert given_in(message) == {"--label-column", "--na", "--sheet", "--window",
                                 "--max-count"}
    assert not out.exists() and not out.with_name("q5.partial").exists()


def test_folder_options_given_for_a_table(tmp_path):
    table = tmp_path / "table.csv"
    table.write_text("x,y\n1,0\n2,1\n")
    message = refused(table, "-o", tmp_path / "t", "--group-by-stem", "--unlabelled",
                      "--window", "3", "--check", "decode")
    assert "taken for a text table (CSV, TSV or .txt):" in message
    assert "--unlabelled (only for folders with or without --spec)" in message
    assert "--group-by-stem, --check (only for folders of files without --spec)" in message
    assert given_in(message) == {"--unlabelled", "--group-by-stem", "--check", "--window"}


def test_an_option_given_at_its_default_value_is_still_refused(image_folder, tmp_path):
    message = refused(image_folder, "-o", tmp_path / "o", "--na", "fail", "--skip-rows", "0",
                      "--task", "classify")
    assert given_in(message) == {"--na", "--task", "--skip-rows"}
    run("pack", image_folder, "-o", tmp_path / "plain", "-q")  # defaults: nothing refused


def test_csv_options_for_a_workbook_or_parquet_and_excel_options_for_a_csv(tmp_path):
    frame = pd.DataFrame({"x": [1.0, 2.0, 3.0], "y": ["a", "b", "a"]})
    book, parquet, csv = tmp_path / "t.xlsx", tmp_path / "t.parquet", tmp_path / "t.csv"
    frame.to_excel(book, index=False)
    frame.to_parquet(parquet)
    frame.to_csv(csv, index=False)
    message = refused(book, "-o", tmp_path / "o", "--delimiter", ";", "--decimal", ",",
                      "--encoding", "gbk")
    assert "taken for an Excel workbook" in message
    assert "--delimiter, --decimal (only for CSV/TSV tables)" in message
    assert "--encoding (only for CSV/TSV tables and folders with or without --spec)" in message
    message = refused(parquet, "-o", tmp_path / "o", "--header-row", "2", "--sheet", "S")
    assert "taken for a Parquet table" in message
    assert "--header-row (only for CSV/TSV tables and Excel workbooks)" in message
    assert "--sheet (only for Excel workbooks)" in refused(csv, "-o", tmp_path / "o",
                                                           "--sheet", "S")
    for source, extra in [(book, ["--sheet", "Sheet1", "--header-row", "1"]),
                          (csv, ["--delimiter", ",", "--decimal", ".", "--encoding", "utf-8",
                                 "--skip-rows", "0", "--workers", "2"]),
                          (parquet, ["--feature-columns", "x", "--na", "drop"])]:
        run("pack", source, "--label-column", "y", "-o", tmp_path / f"ok-{source.suffix[1:]}",
            "-q", *extra)


def write_dump(path, records: int = 12) -> None:
    """A little-endian IMU dump as the shipped `imu` spec reads it (64-byte header)."""
    import struct

    header = b"IMU1" + struct.pack("<II", records, 200)
    body = b"".join(struct.pack("<Q3f3fH2x", i, *[0.5] * 6, i % 2) for i in range(records))
    path.write_bytes(header.ljust(64, b"\0") + body)


def test_folder_and_table_options_given_for_a_binary_dump(tmp_path):
    dump = tmp_path / "imu.bin"
    write_dump(dump)
    message = refused(dump, "--spec", "imu", "-o", tmp_path / "o", "--check", "decode",
                      "--on-error", "fail", "--unlabelled", "--label-column", "y",
                      "--encoding", "gbk", "--stride", "2")
    assert "taken for a binary dump (a file with --spec)" in message
    assert "--on-error" in message and "--encoding" in message
    assert "--stride (only with --window)" in message
    run("pack", dump, "--spec", "imu", "-o", tmp_path / "ok", "--window", "4", "--stride", "2",
        "--label-field", "status", "--tail", "drop", "-q")


def test_options_for_a_folder_of_binary_files(tmp_path):
    folder = tmp_path / "dumps"
    (folder / "a").mkdir(parents=True)
    for i in range(3):
        write_dump(folder / "a" / f"{i}.bin", 2 + i)
    message = refused(folder, "--spec", "imu", "-o", tmp_path / "o", "--group-by-stem",
                      "--window", "2", "--check", "decode", "--encoding", "utf-8")
    assert "taken for a folder of binary files (a folder with --spec)" in message
    assert "--encoding (only with --labels)" in message
    assert given_in(message) == {"--group-by-stem", "--check", "--window", "--encoding"}
    run("pack", folder, "--spec", "imu", "-o", tmp_path / "ok", "--unlabelled", "--on-error",
        "fail", "--tail", "drop", "--no-follow-symlinks", "-q")


def test_encoding_of_a_labels_file_applies_to_a_folder(tmp_path, image_folder):
    labels = tmp_path / "labels.csv"
    labels.write_text("filename,label\nbird/plain.jpg,x\ncat/plain.jpg,y\n")
    assert "--encoding (only with --labels)" in refused(image_folder, "-o", tmp_path / "o",
                                                        "--encoding", "utf-8")
    run("pack", image_folder, "--labels", labels, "--encoding", "utf-8", "-o",
        tmp_path / "ok", "-q")


@pytest.mark.parametrize("fmt", ["lmdb", "hdf5"])
def test_tar_shard_bounds_with_another_format_are_a_warning(fmt, image_folder, tmp_path):
    result = run("pack", image_folder, "--to", fmt, "-o", tmp_path / "o", "--max-count", "3",
                 "--shard-size", "1MB", "-q")
    assert (f"Warning: --to {fmt} ignores --shard-size, --max-count (only for --to "
            "webdataset or --to tfrecord).") in result.output
    for to in ("webdataset", "tfrecord"):
        result = run("pack", image_folder, "--to", to, "-o", tmp_path / to, "--max-count", "3",
                     "-q")
        assert "Warning" not in result.output


# -- --resume refused: what changed -----------------------------------------------------

def interrupt(monkeypatch, *args) -> None:
    """Run `packer pack ARGS`, stopped (as by Ctrl-C) after its second saved part."""
    save, calls = writing.save_progress, []

    def save_then_stop(*saved):
        save(*saved)
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(writing, "save_progress", save_then_stop)
        run("pack", *args, expect=130)


def test_resume_ignores_options_the_format_ignores(monkeypatch, image_folder, tmp_path):
    monkeypatch.setattr("packer.formats.protocol.BLOCK_COUNT", 3)
    args = (image_folder, "--to", "hdf5", "-o", tmp_path / "h", "-q")
    interrupt(monkeypatch, *args, "--max-count", "500")
    run("pack", *args, "--resume")  # --max-count left out: hdf5 never read it
    assert "OK" in run("verify", tmp_path / "h", "--against", image_folder, "-q").output


def test_resume_names_the_changed_options(monkeypatch, image_folder, tmp_path):
    out = tmp_path / "o"
    interrupt(monkeypatch, image_folder, "-o", out, "--max-count", "3", "-q")
    message = run("pack", image_folder, "-o", out, "--max-count", "4", "--no-follow-symlinks",
                  "--resume", "-q", expect=2).output
    assert message == (f"Error: {out}.partial: the options changed since the interrupted run "
                       "(--follow-symlinks was on, now off; --max-count was 3, now 4); pass "
                       "the earlier values to resume, or start over with --overwrite\n")
    message = run("pack", image_folder, "-o", out, "--to", "hdf5", "--resume", "-q",
                  expect=2).output
    assert "(--to was webdataset, now hdf5; --max-count was 3, now not given)" in message
    run("pack", image_folder, "-o", out, "--max-count", "3", "--resume", "-q")
    assert packer.load_manifest(out)["options"]["max_count"] == 3


def test_resume_says_the_input_changed_with_the_sample_counts(monkeypatch, image_folder,
                                                               tmp_path):
    out = tmp_path / "o"
    interrupt(monkeypatch, image_folder, "-o", out, "--max-count", "3", "-q")
    total = json.loads((out.with_name("o.partial") / "progress.json").read_text())["input"]
    (image_folder / "bird" / "tilde~1.jpg").rename(image_folder / "bird" / "renamed.jpg")
    message = run("pack", image_folder, "-o", out, "--max-count", "3", "--resume",
                  expect=2).output
    assert (f"the input changed since the interrupted run (still {total['samples']:,} "
            "samples, not the same); start over with --overwrite") in message
    (image_folder / "bird" / "added.txt").write_text("one more sample")
    message = run("pack", image_folder, "-o", out, "--max-count", "5", "--resume",
                  expect=2).output
    assert (f"the input and the options changed since the interrupted run "
            f"({total['samples']:,} samples then, {total['samples'] + 1:,} now; "
            "--max-count was 3, now 5); start over with --overwrite") in message


def test_resume_of_an_older_progress_file_keeps_the_plain_message(monkeypatch, image_folder,
                                                                  tmp_path):
    out = tmp_path / "o"
    interrupt(monkeypatch, image_folder, "-o", out, "--max-count", "3", "-q")
    progress_path = out.with_name("o.partial") / "progress.json"
    progress = json.loads(progress_path.read_text())
    del progress["options"], progress["input"]
    progress_path.write_text(json.dumps(progress))
    message = run("pack", image_folder, "-o", out, "--max-count", "4", "--resume",
                  expect=2).output
    assert "the input or the options changed since the interrupted run; start over" in message
