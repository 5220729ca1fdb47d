"""Binary dumps written the way a logger writes them, with struct, for the tests; and
their packed samples read back."""

import struct

import numpy as np

from packer.read.dataset import iter_samples
from packer.read.decode import Decoder

IMU_RECORD = "Q3f3fH2x"  # u8 timestamp, f4 accel[3], f4 gyro[3], u2 status, 2 padding bytes


def write_imu(path, records: int, order: str, trailing: bytes = b"") -> list[tuple]:
    """An IMU dump written record by record with struct; returns the decoded values."""
    prefix = "<" if order == "little" else ">"
    rng = np.random.default_rng(7)
    rows = [(i * 5_000_000, *rng.standard_normal(6).astype(np.float32).tolist(), i % 3)
            for i in range(records)]
    header = b"IMU1" + struct.pack(prefix + "II", records, 200)
    body = b"".join(struct.pack(prefix + IMU_RECORD, *row) for row in rows)
    path.write_bytes(header.ljust(64, b"\0") + body + trailing)
    return [struct.unpack(prefix + IMU_RECORD, struct.pack(prefix + IMU_RECORD, *r)) for r in rows]


def decoded(path):
    decoder = Decoder("raw")
    return [decoder(s) for s in iter_samples(path)]
