"""Sample keys: reversible names that survive the WebDataset `KEY.FIELD` split.

A key is the sample's path relative to the packed folder, without its extension,
with `%`, `.` and `~` percent-escaped (and bytes that are not UTF-8 escaped as
`%XX`), so a key never holds a dot and the first dot of a tar member name always
separates key from field. `~` is reserved: when several files share a stem and are
packed as separate samples, their keys become `STEM~EXT`, and `~EXT` is dropped
again when the path is restored.
"""

import re
from urllib.parse import unquote

_ESCAPED = {"%", ".", "~"}
_NEEDS_ESCAPE = re.compile("[%.~\udc80-\udcff]")
_DISAMBIGUATOR = "~"
NO_EXTENSION_FIELD = "_"  # the field of a file that has no extension


def encode_key(stem_path: str) -> str:
    """`cats/my.photo 1` -> `cats/my%2Ephoto 1`; the inverse is `decode_key`."""
    if not _NEEDS_ESCAPE.search(stem_path):
        return stem_path
    out = []
    for char in stem_path:
        code = ord(char)
        if char in _ESCAPED:
            out.append(f"%{code:02X}")
        elif 0xDC80 <= code <= 0xDCFF:  # a raw byte of a name that is not UTF-8
            out.append(f"%{code - 0xDC00:02X}")
        else:
            out.append(char)
    return "".join(out)


def disambiguate(key: str, field: str) -> str:
    """The key of one of several files that share a stem but are separate samples."""
    return f"{key}{_DISAMBIGUATOR}{encode_key(field)}"


def decode_key(key: str) -> str:
    """The stem path a key was made from (without any `~EXT` disambiguator)."""
    return unquote(key.split(_DISAMBIGUATOR, 1)[0], errors="surrogateescape")


def split_name(name: str) -> tuple[str, str]:
    """`stem.ext` -> (stem, escaped ext); a name with no extension gets field `_`."""
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem or not ext:  # `README`, `.profile`, `name.`
        return name, NO_EXTENSION_FIELD
    return stem, encode_key(ext)


def restored_path(key: str, field: str) -> str:
    """The relative path a sample's field came from (fields are escaped like keys)."""
    stem = decode_key(key)
    return stem if field == NO_EXTENSION_FIELD else f"{stem}.{decode_key(field)}"


def split_member(member: str) -> tuple[str, str]:
    """A tar member `dir/KEY.FIELD` -> (`dir/KEY`, `FIELD`), as webdataset splits it."""
    folder, slash, base = member.rpartition("/")
    key, _, field = base.partition(".")
    return folder + slash + key, field
