"""Short lists and counts in messages and summaries."""

NAMES_LIMIT = 5


def names_text(names: list[str], total: int | None = None) -> str:
    """The first few names, and `...` when there are more."""
    more = (total if total is not None else len(names)) > NAMES_LIMIT
    return ", ".join(names[:NAMES_LIMIT]) + (", ..." if more else "")


def plural(count: int, word: str, words: str | None = None) -> str:
    return f"{count:,} {word if count == 1 else words or word + 's'}"
