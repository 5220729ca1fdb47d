"""docs/architecture.md's module map lists every module of packer/, and nothing else."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def map_entries() -> set[str]:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = text.split("## The modules", 1)[1].split("```", 2)[1]
    return {line.split()[0] for line in block.splitlines() if line.startswith("packer/")}


def tree_entries() -> set[str]:
    """Every module as its path, a package as its folder (for its __init__.py)."""
    entries = set()
    for path in (ROOT / "packer").rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        if path.name == "__init__.py" and path.parent != ROOT / "packer":
            rel = rel.removesuffix("__init__.py")
        if path.name != "__main__.py":
            entries.add(rel)
    return entries


def test_the_module_map_matches_the_tree():
    listed, present = map_entries(), tree_entries()
    assert not present - listed, f"modules missing from the module map: {present - listed}"
    assert not listed - present, f"the module map lists what is not there: {listed - present}"
