"""Damaged samples in `train fit`: one line an epoch, the list in metrics.jsonl."""

import io
import json

import numpy as np
from click.testing import CliRunner
from PIL import Image

from conftest import colour_images
from conftest import run as packer_run
from train.cli import cli


def damaged_tiff() -> bytes:
    """A deflate TIFF whose compressed data is garbled: libtiff says so on stderr."""
    out = io.BytesIO()
    pixels = np.random.default_rng(0).integers(0, 255, (32, 32, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(out, "TIFF", compression="tiff_deflate")
    data = bytearray(out.getvalue())
    directory = int.from_bytes(data[4:8], "little")  # the strip lies before it
    for i in range(16, directory - 16):
        data[i] ^= 0x5A
    return bytes(data)


def test_damaged_samples_are_one_line_an_epoch_and_listed_in_metrics(tmp_path, capfd):
    images = colour_images(tmp_path / "images", [(200, 30, 30), (30, 30, 200)], 20, 30)
    good = (images / "c0" / "0.jpg").read_bytes()
    (images / "c0" / "1.jpg").write_bytes(good[:len(good) // 2])  # truncated
    (images / "c1" / "2.jpg").write_bytes(good[:200] + bytes(300) + good[-2:])
    (images / "c1" / "3.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    (images / "c0" / "4.tif").write_bytes(damaged_tiff())
    (images / "c0" / "4.jpg").unlink()
    (images / "c1" / "3.jpg").unlink()
    packer_run("pack", images, "-o", tmp_path / "wds", "--check", "none", "-q")
    result = CliRunner().invoke(cli, [
        "fit", str(tmp_path / "wds"), "--out", str(tmp_path / "run"), "--epochs", "2",
        "--workers", "2", "--cache", "off", "--image-size", "16", "--batch-size", "8",
        "--lr", "3e-3", "--val-split", "0.2"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    said = result.output + capfd.readouterr().err
    assert "replaced by another sample" not in said and "ZIPDecode" not in said
    assert "UserWarning" not in said
    assert said.count("damaged samples replaced this epoch; listed in metrics.jsonl") == 2
    records = [json.loads(line) for line in
               (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    for record in records:
        listed = {sample["key"]: sample for sample in record["damaged_samples"]}
        assert set(listed) == {"c0/1", "c1/2", "c1/3", "c0/4"}
        assert all(sample["replaced"] and sample["reasons"] for sample in listed.values())
