"""Every field shape in either byte order reads back as numpy reads the source, from
every format and from HDF5 through h5py alone; a dump stored in the wrong order is
caught by plain `packer verify`."""

import h5py
import numpy as np
import pytest
from dumps import decoded

from conftest import run
from packer.formats import FORMAT_NAMES

RECORDS = 40
FIELDS = {"scalar": ("i2", ()), "pair": ("i2", (2,)), "grid": ("f4", (2, 3)),
          "wide": ("i4", ()), "s24": ("i3", ())}
ORDER = {"little": "<", "big": ">"}


def write_dump(folder, order: str, s24: bool = True, shaped_only: bool = False):
    """A headerless dump of RECORDS records in `order` (scalar i2, pair i2[2], grid
    f4[2,3] and wide i4, or with `shaped_only` pair and grid alone; with `s24` an i3 after
    them; then 2 padding bytes), its spec, and the values numpy reads from it. Without a
    24-bit field HDF5 stores the records whole, as a compound dataset; numpy takes a
    big-endian record of shaped fields only for a native one."""
    mark, kept = ORDER[order], ["pair", "grid"] if shaped_only else ["scalar", "pair", "grid",
                                                                      "wide"]
    numbers = np.dtype([(name, mark + FIELDS[name][0], FIELDS[name][1]) for name in kept])
    rng = np.random.default_rng(5)
    values = np.zeros(RECORDS, numbers)
    for name in kept:
        kind, shape = FIELDS[name]
        values[name] = (rng.normal(0, 100, (RECORDS, *shape)) if kind == "f4" else
                        rng.integers(-30000, 30000, (RECORDS, *shape)))
    wide24 = rng.integers(-2**23, 2**23, RECORDS)
    rows = [row.tobytes() + (int(v % 2**24).to_bytes(3, order) if s24 else b"") + b"\0\0"
            for row, v in zip(values, wide24, strict=True)]
    (folder / "dump.bin").write_bytes(b"".join(rows))
    lines = [f'{name} = {{type = "{FIELDS[name][0]}"'
             + (f", shape = {list(FIELDS[name][1])}" if FIELDS[name][1] else "") + "}"
             for name in kept + (["s24"] if s24 else [])]
    (folder / "spec.toml").write_text(f'byte_order = "{order}"\ncount = {{from = "file_size"}}'
                                      "\n[record.fields]\n" + "\n".join(lines)
                                      + "\n_pad = {padding = 2}\n")
    expected = {name: values[name].astype(values[name].dtype.newbyteorder("="))
                for name in kept}
    if s24:
        expected["s24"] = wide24.astype(np.int32)
    return expected


def pack(folder, fmt, *extra, expect=0):
    out = folder / f"out-{fmt}"
    run("pack", folder / "dump.bin", "--spec", folder / "spec.toml", "--to", fmt, "-o", out,
        "-q", *extra, expect=expect)
    return out


@pytest.mark.parametrize("fields", ["with-i3", "whole-records", "shaped-only"])
@pytest.mark.parametrize("order", ORDER)
@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_every_field_shape_reads_back_as_numpy_reads_the_source(fmt, order, fields,
                                                               tmp_path):
    expected = write_dump(tmp_path, order, s24=fields == "with-i3",
                          shaped_only=fields == "shaped-only")
    out = pack(tmp_path, fmt)
    samples = decoded(out)
    assert len(samples) == RECORDS
    for name, values in expected.items():
        got = np.stack([np.asarray(s[f"{name}.npy"]) for s in samples])
        assert got.dtype == values.dtype, name
        assert np.array_equal(got, values), name
    assert run("verify", out).exit_code == 0


@pytest.mark.parametrize("shaped_only", [False, True])
@pytest.mark.parametrize("order", ORDER)
def test_hdf5_records_read_by_h5py_alone_hold_the_values(order, shaped_only, tmp_path):
    expected = write_dump(tmp_path, order, s24=False, shaped_only=shaped_only)
    out = pack(tmp_path, "hdf5")
    with h5py.File(out, "r") as file:
        records = file["records"][:]
    for name in expected:
        assert np.array_equal(records[name], expected[name]), name


def test_records_stored_in_the_wrong_order_fail_plain_verify(tmp_path, monkeypatch):
    """As a copy that took a big-endian dump for a native one did: verify must see it."""
    from packer.sources.binary import dump

    write_dump(tmp_path, "big", s24=False, shaped_only=True)
    monkeypatch.setattr(dump, "native_order", lambda dtype: True)
    out = pack(tmp_path, "hdf5")
    monkeypatch.undo()
    report = run("verify", out, expect=1).output
    assert "samples 0..39" in report and "values of its records differ" in report


def test_a_sun_au_file_of_two_channels_reads_back_in_every_format(tmp_path):
    """The file the corruption was found on: a Sun AU header (big-endian, `.snd`), then
    16-bit frames of two channels, described by a spec whose one field has a shape."""
    frames = np.array([[558, -2], [30000, -30000], [1, 256]] * 20, dtype=">i2")
    header = b".snd" + np.array([24, frames.nbytes, 3, 8000, 2], ">u4").tobytes()
    (tmp_path / "a.au").write_bytes(header + frames.tobytes())
    (tmp_path / "au.toml").write_text(
        'byte_order = "big"\ncount = {from = "file_size"}\n[header]\nsize = 24\n'
        '[header.fields]\nmagic = {type = "bytes4", offset = 0, expect = ".snd"}\n'
        '[record.fields]\nframe = {type = "i2", shape = [2]}\n')
    for fmt in FORMAT_NAMES:
        out = tmp_path / fmt
        run("pack", tmp_path / "a.au", "--spec", tmp_path / "au.toml", "--to", fmt, "-o", out,
            "-q")
        got = np.stack([np.asarray(s["frame.npy"]) for s in decoded(out)])
        assert got.tolist() == frames.tolist(), fmt
        assert run("verify", out).exit_code == 0
    with h5py.File(tmp_path / "hdf5", "r") as file:
        assert file["records"]["frame"][0].tolist() == [558, -2]
