"""Binary dumps (a header, then fixed-size records) described by TOML spec files.

    from packer.binary import load_spec, open_dump, record_arrays, Windows
    spec = load_spec("imu.toml")              # or a shipped spec by name: "imu"
    dump = open_dump("imu.bin", spec)         # checks magic, size and count; DumpError if not
    for records in dump.chunks():             # native-order structured arrays, bounded memory
        arrays = record_arrays(records, spec) # {"timestamp_ns": (n,), "accel": (n, 3), ...}

`packer/binary/records.py` says how records and windows of records become samples.
"""

from packer.binary.dump import Check, Dump, DumpError, examine_dump, open_dump
from packer.binary.records import Windows, record_arrays, window_arrays
from packer.binary.spec import Spec, SpecError, load_spec, parse_spec, shipped_spec_names

__all__ = ["Check", "Dump", "DumpError", "Spec", "SpecError", "Windows", "examine_dump",
           "load_spec", "open_dump", "parse_spec", "record_arrays", "shipped_spec_names",
           "window_arrays"]
