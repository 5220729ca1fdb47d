import pytest

from packer.sample import (
    decode_key,
    disambiguate,
    encode_key,
    restored_path,
    split_member,
    split_name,
)

NAMES = ["a/b c", "多.dots.in", "x%2Ey", "t~1", "a/.b", "raw\udcff\udcfebytes", "end."]


@pytest.mark.parametrize("name", NAMES)
def test_keys_round_trip_and_have_no_dots(name):
    key = encode_key(name)
    assert "." not in key and "~" not in key
    assert decode_key(key) == name
    assert key.encode("utf-8")  # always valid UTF-8, so JSON, tar and HDF5 can hold it


def test_member_split_matches_webdataset():
    key = encode_key("dir.v2/my.photo 1")
    assert split_member(f"{key}.jpg") == (key, "jpg")
    assert split_member(f"{key}.seg.png") == (key, "seg.png")


def test_disambiguated_keys_restore_the_original_names():
    key = disambiguate(encode_key("a/img"), "png")
    assert decode_key(key) == "a/img"
    assert restored_path(key, "png") == "a/img.png"


@pytest.mark.parametrize("name", ["README", "a.", ".profile", "x.tar.gz", "b.J%G"])
def test_split_name_is_reversed_by_restored_path(name):
    stem, field = split_name(name)
    assert restored_path(encode_key(stem), field) == name
