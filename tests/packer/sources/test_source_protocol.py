"""The source kind protocol, not a kind's name, drives `packer pack`, its options and
`verify --against`: a kind registered by this test alone (tests/toy_source.py), with one
registry line, is claimed, takes its own option, is refused another kind's, packs and
reads back."""

import pytest

import packer
from conftest import run
from packer import sources
from packer.cli import cli
from packer.cli.pack_command import pack_command
from packer.sources.base import Applies, Kind


@pytest.mark.parametrize("module", sources.source_kinds(), ids=lambda m: m.NAME)
def test_every_registered_kind_declares_the_protocol(module):
    assert all(isinstance(kind, Kind) for kind in module.KINDS.values())
    assert all(isinstance(applies, Applies) for applies in module.OPTIONS.values())
    for name in ("claims", "claims_url", "scan_input", "summary_text", "against"):
        assert callable(getattr(module, name)), name
    options = sources.kind_options(module)
    assert options.of({}) == options()  # every option has a default


@pytest.fixture
def toy(monkeypatch):
    """The toy kind in the registry, and in `packer pack`'s options, for this test only."""
    monkeypatch.setitem(sources._KINDS, "toy", "toy_source")
    sources.all_kinds.cache_clear()
    sources.source_options.cache_clear()
    monkeypatch.setitem(cli.commands, "pack", pack_command())
    yield
    monkeypatch.undo()
    sources.all_kinds.cache_clear()
    sources.source_options.cache_clear()


def test_a_source_kind_is_one_module_and_one_registry_line(toy, tmp_path):
    words = tmp_path / "words.toy"
    words.write_text("cat whiskers\ndog bone\ncat yarn\nbird seed\ndog ball\n")
    out = tmp_path / "words-wds"
    result = run("pack", words, "--to", "webdataset", "-o", out, "--toy-upper",
                 "--max-count", "2")
    assert "Toy: 5 words, upper-cased: True" in result.output
    manifest = packer.load_manifest(out)
    assert manifest["source"]["kind"] == "toy" and manifest["count"] == 5
    assert manifest["classes"] == ["bird", "cat", "dog"] and len(manifest["parts"]) == 3
    assert manifest["options"]["toy_upper"] is True
    assert manifest["options"]["label_column"] == []  # every kind's options, as before

    samples = list(packer.iter_samples(out))
    assert [s["word.txt"] for s in samples] == [b"WHISKERS", b"BONE", b"YARN", b"SEED", b"BALL"]
    assert [manifest["classes"][s["cls"]] for s in samples] == ["cat", "dog", "cat", "bird",
                                                                 "dog"]
    assert "OK: 5 samples" in run("verify", out, "--against", words).output
    words.write_text("cat whiskers\ndog bones\ncat yarn\nbird seed\ndog ball\n")
    assert "word b'BONE', the source has b'BONES'" in run(
        "verify", out, "--against", words, expect=1).output

    refused = run("pack", words, "-o", tmp_path / "x", "--window", "3", expect=2).output
    assert "taken for a toy file (.toy): --window (only for binary dumps" in refused
    refused = run("pack", tmp_path, "-o", tmp_path / "y", "--toy-upper", expect=2).output
    assert "--toy-upper (only for toy files)" in refused


def test_without_its_registry_line_the_kind_is_unknown(tmp_path):
    words = tmp_path / "words.toy"
    words.write_text("cat whiskers\n")
    assert "No such option '--toy-upper'" in run("pack", words, "-o", tmp_path / "o",
                                                 "--toy-upper", expect=2).output
    unclaimed = run("pack", words, "-o", tmp_path / "o", expect=2).output
    assert "a table must end in" in unclaimed and "a toy file" not in unclaimed
