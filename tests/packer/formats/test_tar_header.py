import random
import string

import pytest

from packer.formats.webdataset import _header, _tarfile_header


@pytest.mark.parametrize("seed", range(5))
def test_fast_header_equals_tarfiles(seed):
    rng = random.Random(seed)
    for _ in range(200):
        name = "".join(rng.choices(string.printable[:94] + " ", k=rng.randint(1, 100)))
        size = rng.choice([0, 1, 511, 512, rng.randint(0, 8**11 - 1)])
        assert _header(name, size) == _tarfile_header(name, size), (name, size)


@pytest.mark.parametrize("name", ["x" * 101 + ".jpg", "ünï.jpg", "a/" * 60 + "b.png"])
def test_long_and_unicode_names_get_pax_headers(name):
    assert _header(name, 5) == _tarfile_header(name, 5)
    assert len(_header(name, 5)) > 512


def test_every_flipped_header_bit_is_caught_by_the_index(tmp_path):
    from packer.errors import DatasetError
    from packer.formats.webdataset.tarindex import index_shard

    member = _header("k.bin", 3) + b"abc" + bytes(509)
    shard = tmp_path / "s.tar"
    shard.write_bytes(member + bytes(1024))
    assert index_shard(str(shard)).keys == ["k"]
    for bit in range(512 * 8):
        if bit // 8 in range(148, 156):  # the checksum field itself
            continue
        broken = bytearray(member)
        broken[bit // 8] ^= 1 << (bit % 8)
        shard.write_bytes(bytes(broken) + bytes(1024))
        with pytest.raises(DatasetError, match="bad tar header checksum at byte offset 0"):
            index_shard(str(shard))


def test_a_truncated_shard_is_an_error_not_a_short_sample(tmp_path):
    from packer.errors import DatasetError
    from packer.formats.webdataset.tarindex import index_shard

    member = _header("k.bin", 600) + bytes(600) + bytes(424)
    shard = tmp_path / "s.tar"
    shard.write_bytes(member * 2)  # complete, without the end-of-archive blocks
    assert index_shard(str(shard)).keys == ["k"]
    shard.write_bytes(member + member[:700])
    with pytest.raises(DatasetError, match="truncated: the member at byte offset 1,536"):
        index_shard(str(shard))
    shard.write_bytes(member + member[:100])
    with pytest.raises(DatasetError, match="inside the tar header"):
        index_shard(str(shard))
