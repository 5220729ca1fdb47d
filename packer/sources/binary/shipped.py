"""The specs that ship in specs/, loadable by name (`--spec wav`)."""

from importlib import resources
from pathlib import Path


def shipped_spec_names() -> list[str]:
    """The shipped specs' names: the one list that every --help and message shows."""
    folder = Path(str(resources.files("packer.sources.binary").joinpath("specs")))
    return sorted(path.stem for path in folder.glob("*.toml"))
