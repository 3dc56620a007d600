"""book/ in layers, a folder each: every module imports only its own layer, the layers below it and the
ground; the bottom layer reads parts and regions without torch or the drift checker; and no module of
book/ (the widgets included) is part of an import cycle."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

BOOK = Path(__file__).resolve().parents[2] / "book"
# The layers, bottom first (README, "How the book is put together"): a module of book/LAYER/ may import
# modules of its own layer, of the layers before it, and of the ground.
LAYERS = ("parts", "builds", "run", "display")
# The ground, under every layer: where files are, the first import, plain text, a chapter's model.
# It imports nothing of book/ but the ground.
GROUND = ("book.paths", "book.autoload", "book.text", "book.models")
# The faces, above every layer: what the notebooks import (book/__init__.py) and the commands
# (`python -m book.sync`, `book.execute`, `book.bench`). They may import anything; nothing imports them.
FACES = ("book", "book.sync", "book.execute", "book.bench")
# The bottom layer's reading of parts and regions. Nothing above it may be imported by it.
BOTTOM = ("book.paths", "book.parts.regions", "book.parts.pycells")


def _module_name(path: Path) -> str:
    relative = path.relative_to(BOOK.parent).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The book modules `path` imports, anywhere in it (function-level and TYPE_CHECKING imports too)."""
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from book.display.widgets import table` imports the module book.display.widgets.table (its
            # package is being imported anyway: every module needs its parent package, which is not an
            # edge); `from book.display.widgets import trace` imports a name of book.display.widgets.
            names = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names
            ]
        else:
            continue
        for name in names:
            # `from book.parts import cells` imports book.parts.cells; `from book.parts.cells import X`
            # imports book.parts.cells.
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name:  # `import book` and `from book import trace` too: the notebooks' face
                found.add(name)
    return found


def import_graph() -> dict[str, set[str]]:
    paths = sorted(BOOK.rglob("*.py"))
    modules = {_module_name(path) for path in paths}
    return {_module_name(path): _imports(path, modules) - {_module_name(path)} for path in paths}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_graph_sees_the_imports_it_must_see() -> None:
    graph = import_graph()
    assert "book.autoload" in graph["book"] and "book" not in graph["book"]
    assert "book.parts.regions" in graph["book.builds.units"]
    assert "book.builds.builder" in graph["book"]  # a function-level import counts (book.build())
    assert "book.display.widgets.interactive" in graph["book.display.widgets.table_view"]


def test_book_has_no_import_cycle() -> None:
    assert _cycle(import_graph()) is None


def test_the_widgets_have_no_import_cycle() -> None:
    graph = {
        module: {target for target in targets if target.startswith("book.display.widgets")}
        for module, targets in import_graph().items()
        if module.startswith("book.display.widgets")
    }
    assert _cycle(graph) is None
    assert "book.display.widgets.table_view" not in graph["book.display.widgets.interactive"]


def layer_of(module: str) -> str:
    """The layer of a module of book/: one of LAYERS, "ground" or "face"."""
    if module in GROUND:
        return "ground"
    if module in FACES:
        return "face"
    parts = module.split(".")
    if len(parts) >= 2 and parts[1] in LAYERS:
        return parts[1]
    raise LookupError(f"{module} is in no layer: put it in a layer's folder, or list it in GROUND or FACES")


def violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import that goes up: into a face, or into a layer above the importer's (the ground is below
    every layer)."""
    rank = {"ground": -1, **{layer: i for i, layer in enumerate(LAYERS)}}
    found = []
    for module, targets in sorted(graph.items()):
        layer = layer_of(module)
        if layer == "face":
            continue
        for target in sorted(targets):
            into = layer_of(target)
            if into == "face" or rank[into] > rank[layer]:
                found.append(f"{module} ({layer}) imports {target} ({into})")
    return found


def test_every_module_is_in_a_layer() -> None:
    for module in import_graph():
        layer_of(module)  # raises for a module in none
    for layer in LAYERS:
        assert (BOOK / layer / "__init__.py").is_file(), layer


def test_each_layer_imports_only_those_below_it() -> None:
    found = violations(import_graph())
    assert not found, "imports against the layers:\n" + "\n".join(found)


def test_a_layer_violation_is_found() -> None:
    graph = {
        "book.parts.regions": {"book.paths", "book.builds.builder"},  # parts reaching up into builds
        "book.builds.builder": {"book.parts.regions"},
        "book.run.sync": {"book.display.errors", "book.sync"},  # up into display, and into a face
        "book.display.errors": {"book.paths", "book.run.chapter"},
        "book.paths": {"book.parts.cells"},  # the ground reaching into a layer
    }
    assert violations(graph) == [
        "book.parts.regions (parts) imports book.builds.builder (builds)",
        "book.paths (ground) imports book.parts.cells (parts)",
        "book.run.sync (run) imports book.display.errors (display)",
        "book.run.sync (run) imports book.sync (face)",
    ]


def test_a_cycle_is_found() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_the_bottom_layer_imports_only_itself() -> None:
    graph = import_graph()
    for module in BOTTOM:
        assert graph[module] <= set(BOTTOM), (module, graph[module] - set(BOTTOM))


def test_the_build_path_reads_regions_without_the_drift_checker() -> None:
    graph = import_graph()
    for module in (
        "book.builds.builder",
        "book.builds.units",
        "book.parts.cells",
        "book.run.chapter",
        "book.builds.stable",
        "book.builds.toolchain",
    ):
        assert "book.run.sync" not in graph[module], module


def test_the_bottom_layer_loads_without_torch_or_the_drift_checker() -> None:
    code = (
        "import json, sys\n"
        "from book.parts import regions\n"
        "found = regions.extension_regions()\n"
        "history = regions.all_regions()\n"
        "parts = regions.chapter_parts()\n"
        "loaded = [m for m in ('torch', 'book.run.sync', 'book.builds.builder', 'book.parts.cells')\n"
        "          if m in sys.modules]\n"
        "print(json.dumps({'loaded': loaded, 'regions': len(found), 'parts': len(parts)}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=BOOK.parent
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["loaded"] == []
    assert report["regions"] > 0 and report["parts"] > 0
