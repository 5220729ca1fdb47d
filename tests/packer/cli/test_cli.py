"""The command line as a user meets it: help, errors, inspect and verify."""

import json

import numpy as np
import pytest

import packer
from conftest import ROOT, run
from packer.cli import cli
from packer.formats import FORMAT_NAMES, format_module
from packer.read.dataset import iter_samples

README = ROOT / "README.md"


@pytest.mark.parametrize("command", sorted(cli.commands))
def test_every_command_has_help_with_an_example_and_is_in_the_readme(command):
    text = run(command, "--help").output
    assert "Example:" in text
    for option in cli.commands[command].params:
        if option.param_type_name == "option":
            assert option.help, f"{command} {option.name} has no help"
    assert f"packer {command}" in README.read_text()


def test_usage_errors_are_one_line_with_exit_2(image_folder, tmp_path):
    missing = run("pack", tmp_path / "nope", "-o", tmp_path / "o", expect=2).output
    assert missing.strip() == f"Error: {tmp_path / 'nope'}: no such file or folder"
    inside = run("pack", image_folder, "-o", image_folder / "out", expect=2).output
    assert "inside the input" in inside and "Traceback" not in inside
    unknown = run("pack", image_folder, "--to", "zip", "-o", tmp_path / "o", expect=2).output
    assert "'zip' is not one of" in unknown
    bad_size = run("pack", image_folder, "--shard-size", "lots", "-o", tmp_path / "o", expect=2)
    assert "not a size" in bad_size.output
    not_packed = run("inspect", image_folder, expect=1).output
    assert "not a packed dataset" in not_packed


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_inspect_json_has_counts_classes_and_skipped(fmt, image_folder, tmp_path):
    (image_folder / "cat" / "bad.png").write_bytes(b"nope")
    run("pack", image_folder, "--to", fmt, "-o", tmp_path / "p", "-q")
    info = json.loads(run("inspect", tmp_path / "p", "--json").output)
    assert info["format"] == fmt and info["count"] == 3 * 9
    assert info["classes"] == {"bird": 9, "cat": 9, "dog": 9}
    reason = "not a PNG: starts with 6E 6F 70 65, expected 89 50 4E 47"
    assert info["skipped"] == [{"path": "cat/bad.png", "reason": reason}]
    assert set(info["fields"]) == {"jpg", "png", "json", "txt", "_", "cls"}
    text = run("inspect", tmp_path / "p").output
    assert "cat: 9" in text and "cat/bad.png" in text


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_verify_finds_a_changed_byte(fmt, image_folder, tmp_path):
    out = tmp_path / "p"
    run("pack", image_folder, "--to", fmt, "-o", out, "-q")
    target = format_module(fmt).data_files(out, packer.load_manifest(out))[0]
    first_jpeg = next(s["jpg"] for s in iter_samples(out) if "jpg" in s)
    data = bytearray(target.read_bytes())
    at = data.find(first_jpeg) + 100
    data[at] ^= 0xFF
    target.write_bytes(bytes(data))
    result = run("verify", out, "-q", expect=1)
    assert "FAILED" in result.output
    if fmt == "tfrecord":  # each record has a CRC: the damage is located without a source
        assert "do not match their CRC-32C" in result.output
        return
    assert "--against SOURCE` is what names a changed file" in result.output
    result = run("verify", out, "--against", image_folder, "-q", expect=1)
    assert "packed bytes differ from the source file" in result.output


def test_verify_against_finds_a_changed_source(image_folder, tmp_path):
    run("pack", image_folder, "-o", tmp_path / "p", "-q")
    (image_folder / "dog" / "plain.jpg").write_bytes(b"other")
    (image_folder / "dog" / "new.txt").write_text("added later")
    report = json.loads(run("verify", tmp_path / "p", "--against", image_folder, "--json",
                            "-q", expect=1).output)
    assert "dog/plain.jpg: packed bytes differ from the source file" in report["problems"]
    assert any(p.startswith("dog/new.txt: in the source but neither packed") for p in
               report["problems"])


def test_unfinished_output_is_not_mistaken_for_a_dataset(image_folder, tmp_path):
    (tmp_path / "p.partial").mkdir()
    assert "unfinished pack" in run("inspect", tmp_path / "p", expect=1).output


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_any_file_type_is_carried_as_bytes(fmt, tmp_path):
    root = tmp_path / "mixed"
    root.mkdir()
    for i in range(4):  # equal-length arrays, the case h5py's plain assignment trips on
        np.save(root / f"a{i}.npy", np.arange(8, dtype=np.float32) + i)
    (root / "sound.wav").write_bytes(b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(28))
    run("pack", root, "--to", fmt, "-o", tmp_path / "p", "-q")
    run("unpack", tmp_path / "p", "-o", tmp_path / "back", "-q")
    for path in root.iterdir():
        assert (tmp_path / "back" / path.name).read_bytes() == path.read_bytes()


def test_every_shipped_spec_is_listed_in_the_help_that_takes_one():
    from packer.sources.binary import shipped_spec_names

    names = shipped_spec_names()
    assert {"wav", "aiff", "kitti-velodyne", "imu"} <= set(names)
    for command in ("pack", "inspect-binary"):
        text = " ".join(run(command, "--help").output.split()).replace("- ", "-")
        assert all(name in text for name in names), command


def test_both_programs_tell_their_version():
    import subprocess
    import sys

    for program in ("packer", "train"):
        done = subprocess.run([sys.executable, "-m", program, "--version"],
                              capture_output=True, text=True)
        assert done.returncode == 0 and f"{program}, version 0.1.0" in done.stdout
