"""The layers of DESIGN.md, checked from the imports in the code: an import only points
down (or within its layer), no two modules import each other through any chain, and
nothing inside packer imports the facade `packer/__init__.py`.

    layer 0  core       sample, errors, text, compressed, version, manifest
    layer 1  plug-ins   formats/, sources/, storage/, images
    layer 2  wings      packing/, read/
    layer 3  top        datasets/ (verify, unpack, info: inspect), bench, cli/, train/

Every import counts, those inside functions too: an import made late to dodge a cycle
is still the cycle.
"""

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FACADE = "packer"
LAYERS = {  # the longest matching prefix decides
    "packer.sample": 0, "packer.errors": 0, "packer.text": 0, "packer.compressed": 0,
    "packer.version": 0, "packer.manifest": 0,
    "packer.formats": 1, "packer.sources": 1, "packer.storage": 1, "packer.images": 1,
    "packer.packing": 2, "packer.read": 2,
    "packer.datasets": 3, "packer.bench": 3,
    "packer.view": 3, "packer.cli": 3, "packer.__main__": 3, "train": 3, FACADE: 3,
}


def module_files(root: Path) -> dict[str, Path]:
    files = {}
    for package in ("packer", "train"):
        for path in (root / package).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            files[".".join(parts)] = path
    return files


def imported(module: str, path: Path, known) -> set[str]:
    """The project's modules that `module` imports, anywhere in its file."""
    found = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                     for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in known and "." in name:
                name = name.rpartition(".")[0]
            if name in known and name != module:
                found.add(name)
    return found


def graph(root: Path) -> dict[str, set[str]]:
    files = module_files(root)
    return {module: imported(module, path, files) for module, path in files.items()}


def layer(module: str) -> int:
    best = max((prefix for prefix in LAYERS if module == prefix
                or module.startswith(prefix + ".")), key=len, default=None)
    assert best is not None, f"{module} is in no layer: add it to LAYERS"
    return LAYERS[best]


def upward_imports(edges) -> list[str]:
    problems = []
    for module, targets in sorted(edges.items()):
        for target in sorted(targets):
            if target == FACADE and module.startswith("packer"):
                problems.append(f"{module} imports the facade packer/__init__.py")
            elif layer(target) > layer(module):
                problems.append(f"{module} (layer {layer(module)}) imports {target} "
                                f"(layer {layer(target)})")
    return problems


def cycles(edges) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(module):
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in edges[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for module in sorted(edges):
            if module not in index:
                visit(module)
    finally:
        sys.setrecursionlimit(limit)
    return found


def test_imports_only_point_down_the_layers():
    problems = upward_imports(graph(ROOT))
    assert not problems, "imports that run up the layers:\n" + "\n".join(problems)


def test_no_module_imports_itself_through_a_chain():
    found = cycles(graph(ROOT))
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_check_finds_a_cycle_and_an_upward_import_added_on_purpose(tmp_path):
    """A scratch copy of the tree with one cycle and one upward import planted."""
    for package in ("packer", "train"):
        for path in (ROOT / package).rglob("*.py"):
            copy = tmp_path / path.relative_to(ROOT)
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    with open(tmp_path / "packer" / "errors.py", "a", encoding="utf-8") as errors:
        errors.write("\nfrom packer.cli import cli  # planted: core importing the top\n")
    with open(tmp_path / "packer" / "sample.py", "a", encoding="utf-8") as sample:
        sample.write("\nimport packer.errors  # planted\n")
    with open(tmp_path / "packer" / "errors.py", "a", encoding="utf-8") as errors:
        errors.write("\nimport packer.sample  # planted: sample <-> errors\n")
    edges = graph(tmp_path)
    assert "packer.errors (layer 0) imports packer.cli (layer 3)" in upward_imports(edges)
    assert any({"packer.errors", "packer.sample"} <= set(c) for c in cycles(edges))


def test_packing_with_a_transform_never_imports_torch(tmp_path):
    """`--resize` and `--encode` decode with packer.images in the packing workers: with
    torch made unimportable in the process (and so in the workers it forks), every image
    is still transformed."""
    import subprocess

    from conftest import class_images

    source = class_images(tmp_path / "images", 2, 10, size=lambda i: (40 + i, 30))
    script = (
        "import sys\n"
        "class NoTorch:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.partition('.')[0] == 'torch':\n"
        "            raise ImportError('packing imported torch')\n"
        "sys.meta_path.insert(0, NoTorch())\n"
        "import packer\n"
        f"manifest = packer.pack({str(source)!r}, {str(tmp_path / 'out')!r}, packer.PackOptions("
        "to='webdataset', resize='16x16', encode='png', workers=2, progress=False))\n"
        "assert manifest['count'] == 20 and not manifest['skipped'], manifest['skipped']\n"
        "assert manifest['transform'], manifest\n"
        "assert 'torch' not in {m for m, v in sys.modules.items() if v is not None}\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
