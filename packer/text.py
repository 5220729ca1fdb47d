"""Short lists and counts in messages and summaries."""

import re

NAMES_LIMIT = 5
_OBJECT_REPR = re.compile(r" ?<[^<>]* at 0x[0-9a-fA-F]+>")


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
