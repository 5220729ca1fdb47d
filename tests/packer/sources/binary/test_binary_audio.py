"""Chunked audio (WAV, AIFF) and point clouds with the shipped specs: values equal to
the samples written, extra chunks skipped, refusals that name the field."""

import json
import struct
import wave

import numpy as np
import pytest
from audio_files import aiff_bytes, float_wav_bytes, pcm_frames, wav_bytes
from dumps import decoded

import packer
from conftest import run
from packer.sources.binary.chunks import extended_float

EXTRA_BEFORE = [(b"LIST", b"INFOISFT\x05\0\0\0test\0"), (b"fact", b"\x10\0\0\0")]


def values_of(sample: dict, field: str = "sample.npy") -> np.ndarray:
    value = sample[field]
    return value.numpy() if hasattr(value, "numpy") else np.asarray(value)


def expected_array(values: np.ndarray) -> np.ndarray:
    return values[:, 0] if values.shape[1] == 1 else values


@pytest.mark.parametrize("bits", [8, 16, 24, 32])
def test_wav_files_of_every_width_and_channel_count_pack_with_the_wav_spec(bits, tmp_path):
    written = {}
    for channels in (1, 2, 3):
        values = pcm_frames(40 + channels, channels, bits, seed=channels)
        after = [(b"id3 ", b"tag")] if channels == 2 else []
        (tmp_path / "wavs").mkdir(exist_ok=True)
        (tmp_path / "wavs" / f"c{channels}.wav").write_bytes(
            wav_bytes(values, bits, before=EXTRA_BEFORE, after=after))
        written[f"c{channels}"] = expected_array(values)
    run("pack", tmp_path / "wavs", "--spec", "wav", "--to", "hdf5", "-o", tmp_path / "o", "-q")
    samples = {s["__key__"]: values_of(s) for s in decoded(tmp_path / "o")}
    assert set(samples) == set(written)
    for key, values in samples.items():
        assert values.dtype == {8: np.uint8, 16: np.int16, 24: np.int32, 32: np.int32}[bits]
        assert values.tolist() == written[key].tolist()


def test_one_24_bit_stereo_wav_is_one_sample_of_sign_extended_frames(tmp_path):
    values = pcm_frames(500, 2, 24)
    (tmp_path / "a.wav").write_bytes(wav_bytes(values, 24, before=EXTRA_BEFORE))
    for fmt in ("hdf5", "webdataset"):
        out = tmp_path / fmt
        run("pack", tmp_path / "a.wav", "--spec", "wav", "--to", fmt, "-o", out, "-q")
        samples = decoded(out)
        assert len(samples) == 1  # one file, one sample, as in a folder of them
        frames = values_of(samples[0])
        assert frames.dtype == np.int32 and frames.tolist() == values.tolist()
        manifest = packer.load_manifest(out)
        assert manifest["source"]["header"]["bits_per_sample"] == 24
        assert manifest["fields"]["sample.npy"]["dtype"] == "int32"
    text = run("inspect-binary", tmp_path / "a.wav", "--spec", "wav").output
    assert "header 82 bytes" in text and "-8388608  8388607" in text


def test_a_float_wav_with_a_fact_chunk(tmp_path):
    values = np.random.default_rng(1).standard_normal((64, 2)).astype(np.float32)
    (tmp_path / "f.wav").write_bytes(float_wav_bytes(values))
    run("pack", tmp_path / "f.wav", "--spec", "wav", "-o", tmp_path / "o", "-q")
    assert [values_of(s).tolist() for s in decoded(tmp_path / "o")] == [values.tolist()]


@pytest.mark.parametrize("bits,compression", [(16, None), (8, None), (24, b"NONE"),
                                              (24, b"sowt"), (32, None)])
def test_aiff_and_aifc_pack_with_the_aiff_spec(bits, compression, tmp_path):
    values = pcm_frames(70, 2, 16 if bits == 8 else bits)
    if bits == 8:
        values = values // 256  # signed 8-bit
    (tmp_path / "a.aiff").write_bytes(aiff_bytes(values, bits, 44100.0, compression,
                                                 before=[(b"MARK", b"\0\0")]))
    run("pack", tmp_path / "a.aiff", "--spec", "aiff", "-o", tmp_path / "o", "-q")
    assert [values_of(s).tolist() for s in decoded(tmp_path / "o")] == [values.tolist()]
    header = packer.load_manifest(tmp_path / "o")["source"]["header"]
    assert header["sample_rate"] == 44100.0 and header["num_frames"] == 70


def test_the_80_bit_sample_rate(tmp_path):
    from audio_files import extended

    for rate in (8000.0, 22050.0, 44100.0, 96000.0, 11025.5):
        assert extended_float(extended(rate)) == rate
    assert extended_float(bytes(10)) == 0.0


def test_wav_refusals_name_the_field_and_offset(tmp_path):
    values = pcm_frames(30, 1, 16)
    data = bytearray(wav_bytes(values, 16))
    data[20:22] = struct.pack("<H", 2)  # ADPCM
    (tmp_path / "adpcm.wav").write_bytes(bytes(data))
    out = run("pack", tmp_path / "adpcm.wav", "--spec", "wav", "-o", tmp_path / "o",
              expect=1).output
    assert "adpcm.wav: audio_format at offset 20: 2 is not PCM (1)" in out
    data = bytearray(wav_bytes(values, 16))
    data[32:34] = struct.pack("<H", 4)
    (tmp_path / "align.wav").write_bytes(bytes(data))
    out = run("pack", tmp_path / "align.wav", "--spec", "wav", "-o", tmp_path / "o",
              expect=1).output
    assert "block_align at offset 32: expected 2 (1 channels x 2 bytes), found 4" in out
    (tmp_path / "nodata.wav").write_bytes(wav_bytes(values, 16)[:36])
    out = run("pack", tmp_path / "nodata.wav", "--spec", "wav", "-o", tmp_path / "o",
              expect=1).output
    assert "no 'data' chunk; the RIFF chunks found: 'fmt ' at 12" in out
    (tmp_path / "cut.wav").write_bytes(wav_bytes(values, 16)[:-11])
    out = run("pack", tmp_path / "cut.wav", "--spec", "wav", "-o", tmp_path / "o",
              expect=1).output
    assert "header.data_bytes says 30 records" in out and "--tail drop" in out
    run("pack", tmp_path / "cut.wav", "--spec", "wav", "--tail", "drop", "-o", tmp_path / "o",
        "-q")
    assert [len(values_of(s)) for s in decoded(tmp_path / "o")] == [24]
    (tmp_path / "not.wav").write_bytes(b"OggS" + bytes(40))
    out = run("pack", tmp_path / "not.wav", "--spec", "wav", "-o", tmp_path / "p",
              expect=1).output
    assert "riff at offset 0: expected 'RIFF'" in out and "Traceback" not in out


def test_a_folder_of_velodyne_scans_packs_each_with_its_own_count(tmp_path):
    folder = tmp_path / "velodyne"
    folder.mkdir()
    scans = {}
    for i, points in enumerate((100, 37, 2048)):
        cloud = np.random.default_rng(i).standard_normal((points, 4)).astype("<f4")
        (folder / f"{i:010d}.bin").write_bytes(cloud.tobytes())
        scans[f"{i:010d}"] = cloud
    run("pack", folder, "--spec", "kitti-velodyne", "--unlabelled", "-o", tmp_path / "o", "-q")
    samples = decoded(tmp_path / "o")
    assert {s["__key__"]: values_of(s, "point.npy").tolist() for s in samples} == \
        {k: v.tolist() for k, v in scans.items()}
    (folder / "bad.bin").write_bytes(bytes(18))
    run("pack", folder, "--spec", "kitti-velodyne", "--unlabelled", "-o", tmp_path / "p", "-q")
    skipped = packer.load_manifest(tmp_path / "p")["skipped"]
    assert [s["path"] for s in skipped] == ["bad.bin"] and "2 trailing bytes" in \
        skipped[0]["reason"]


def test_a_whole_file_spec_gives_one_sample_alone_or_in_a_folder(tmp_path):
    """A WAV and a KITTI scan, each packed alone and in a folder: one sample per file;
    --window still cuts a long recording into samples."""
    values = pcm_frames(16000, 1, 16)
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "a.wav").write_bytes(wav_bytes(values, 16))
    values = values[:, 0]  # mono: one value a frame
    points = np.random.default_rng(3).standard_normal((1000, 4)).astype("<f4")
    (tmp_path / "scan.bin").write_bytes(points.tobytes())
    for source, spec, field, expected in ((tmp_path / "one" / "a.wav", "wav", "sample.npy",
                                           values), (tmp_path / "one", "wav", "sample.npy",
                                                     values),
                                          (tmp_path / "scan.bin", "kitti-velodyne",
                                           "point.npy", points)):
        out = tmp_path / f"o-{source.name}"
        summary = run("pack", source, "--spec", spec, "-o", out).output
        samples = decoded(out)
        assert len(samples) == 1, source
        assert values_of(samples[0], field).tolist() == expected.tolist()
        assert "times the" not in summary
        assert sum(p["bytes"] for p in packer.load_manifest(out)["parts"]) < 3 * 33_000 + 40_000
    run("pack", tmp_path / "one" / "a.wav", "--spec", "wav", "--window", "4000", "-o",
        tmp_path / "windows", "-q")
    assert [len(values_of(s)) for s in decoded(tmp_path / "windows")] == [4000] * 4


def test_a_pack_that_stores_ten_times_its_input_says_so(tmp_path):
    (tmp_path / "ticks.toml").write_text('byte_order = "little"\ncount = {from = "file_size"}\n'
                                         '[record.fields]\nticks = {type = "i2"}\n')
    (tmp_path / "ticks.bin").write_bytes(np.arange(500, dtype="<i2").tobytes())
    out = run("pack", tmp_path / "ticks.bin", "--spec", tmp_path / "ticks.toml", "-o",
              tmp_path / "o").output
    assert "times the" in out and "--window N" in out


def test_a_folder_of_wavs_keeps_each_header_says_mixed_rates_and_unpacks_to_wavs(tmp_path):
    """Three rates, two channels, 16 and 24 bits: every sample keeps its own rate and
    format, the summary warns of the mixed rates, and unpack writes WAV files whose
    frames, rate, channels and width are the source's."""
    written = {}
    for i, (rate, bits) in enumerate([(8000, 16), (16000, 16), (44100, 24), (16000, 16)]):
        folder = tmp_path / "wavs" / ("dog" if i % 2 else "cat")
        folder.mkdir(parents=True, exist_ok=True)
        values = pcm_frames(300 + i, 2, bits, seed=i)
        (folder / f"{i}.wav").write_bytes(wav_bytes(values, bits, rate=rate))
        written[f"{folder.name}/{i}"] = (values, rate, bits)
    summary = run("pack", tmp_path / "wavs", "--spec", "wav", "-o", tmp_path / "o").output
    assert "3 sample rates: 16000 Hz (2 files), 8000 Hz (1 file), 44100 Hz (1 file)" in summary
    for sample in packer.iter_samples(tmp_path / "o"):
        header = json.loads(sample["audio.json"])
        values, rate, bits = written[sample["__key__"]]
        assert (header["sample_rate"], header["channels"], header["bits"]) == (rate, 2, bits)
    run("verify", tmp_path / "o", "--against", tmp_path / "wavs")
    run("unpack", tmp_path / "o", "-o", tmp_path / "back", "-q")
    for key, (values, rate, bits) in written.items():
        with wave.open(str(tmp_path / "back" / f"{key}.wav")) as back:
            assert (back.getframerate(), back.getnchannels(), back.getsampwidth()) == (
                rate, 2, bits // 8)
            raw = back.readframes(back.getnframes())
        if bits == 24:
            wide = np.frombuffer(raw, np.uint8).reshape(-1, 3)
            got = (wide[:, 0].astype(np.int32) | wide[:, 1].astype(np.int32) << 8
                   | wide[:, 2].astype(np.int8).astype(np.int32) << 16)
        else:
            got = np.frombuffer(raw, "<i2")
        assert got.reshape(-1, 2).tolist() == values.tolist()
    assert not list((tmp_path / "back").rglob("*.npy"))
