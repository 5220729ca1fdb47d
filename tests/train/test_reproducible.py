"""The same seed gives the same weights whatever --workers and --cache (packed data is
read in streams chosen from the data: packer.read.streams), with --deterministic too."""

import pytest
import torch
from click.testing import CliRunner

from conftest import colour_images
from conftest import run as packer_run
from train.cli import cli

COMMON = ["--image-size", "16", "--batch-size", "16", "--lr", "3e-3", "--epochs", "2",
          "--dropout", "0.2", "--seed", "3"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("repro")
    colour_images(root / "images", [(220, 40, 40), (40, 200, 40), (40, 40, 220)], 24, 40)
    packer_run("pack", root / "images", "-o", root / "wds", "--max-count", "20", "-q")
    return root / "wds"


def weights(data, out, *options) -> dict:
    result = CliRunner().invoke(cli, ["fit", str(data), "--out", str(out), *COMMON, *options],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return torch.load(out / "last.pt", weights_only=True)["model"]


def test_the_same_weights_whatever_the_workers_and_the_cache(data, tmp_path):
    reference = weights(data, tmp_path / "w0", "--deterministic", "--workers", "0",
                        "--cache", "off")
    for name, options in {"w2": ("--workers", "2", "--cache", "off"),
                          "ram": ("--workers", "2", "--cache", "ram"),
                          "ram0": ("--workers", "0", "--cache", "ram")}.items():
        other = weights(data, tmp_path / name, "--deterministic", *options)
        assert all(torch.equal(reference[k], other[k]) for k in reference), name
    assert not torch.are_deterministic_algorithms_enabled()  # as it was before the run


def test_the_same_weights_for_any_workers_without_deterministic(data, tmp_path):
    reference = weights(data, tmp_path / "w0", "--workers", "0", "--cache", "off")
    for workers in ("1", "2"):
        other = weights(data, tmp_path / f"w{workers}", "--workers", workers, "--cache", "off")
        assert all(torch.equal(reference[k], other[k]) for k in reference), workers


def test_the_cache_reaches_the_weights_of_a_run_without_it(data, tmp_path):
    """--cache auto may choose either by the memory free: the weights are the same."""
    off = weights(data, tmp_path / "off", "--workers", "2", "--cache", "off")
    ram = weights(data, tmp_path / "ram", "--workers", "2", "--cache", "ram")
    assert all(torch.equal(off[k], ram[k]) for k in off)
