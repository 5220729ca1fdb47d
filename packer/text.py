"""Short lists and counts in messages and summaries; sizes as people write them."""

import re

NAMES_LIMIT = 5
_OBJECT_REPR = re.compile(r" ?<[^<>]* at 0x[0-9a-fA-F]+>")
SIZE_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
              "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def size_bytes(text) -> int:
    """`256MB` -> 256000000, `1GiB` -> 1073741824, `5e8` -> 500000000 (an int is
    returned as it is); a ValueError for anything else."""
    if isinstance(text, int):
        return text
    match = re.fullmatch(r"\s*([0-9.eE+]+)\s*([A-Za-z]*)\s*", str(text))
    unit = match and match.group(2).upper()
    try:
        if match and unit in SIZE_UNITS:
            return int(float(match.group(1)) * SIZE_UNITS[unit])
    except ValueError:
        pass
    raise ValueError(f"{text!r} is not a size; use e.g. 256MB, 1GB, 512MiB")


def names_text(names: list[str], total: int | None = None) -> str:
    """The first few names, and `...` when there are more."""
    more = (total if total is not None else len(names)) > NAMES_LIMIT
    return ", ".join(names[:NAMES_LIMIT]) + (", ..." if more else "")


def plural(count: int, word: str, words: str | None = None) -> str:
    return f"{count:,} {word if count == 1 else words or word + 's'}"


def without_addresses(text: str) -> str:
    """`text` without object reprs such as `<_io.BytesIO object at 0x7f...>` (which a
    library's error message may hold), so the same input gives the same text."""
    return _OBJECT_REPR.sub("", text)
