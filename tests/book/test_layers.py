"""book/ in layers: the bottom layer reads parts and regions without torch or the drift checker,
and no module of book/ (the widgets included) is part of an import cycle."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

BOOK = Path(__file__).resolve().parents[2] / "book"
# The bottom layer: parts and regions, read from files. Nothing above it may be imported by it.
BOTTOM = ("book.paths", "book.regions", "book.pycells")


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
            # `from book.widgets import table` imports the module book.widgets.table (its package is
            # being imported anyway: every module needs its parent package, which is not an edge);
            # `from book.widgets import trace` imports a name of book.widgets.
            names = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names
            ]
        else:
            continue
        for name in names:
            # `from book import cells` imports book.cells; `from book.cells import X` imports book.cells.
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != "book":
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
    assert "book.regions" in graph["book.units"]
    assert "book.builder" in graph["book.cells"]  # a function-level import counts
    assert "book.widgets.interactive" in graph["book.widgets.table_view"]


def test_book_has_no_import_cycle() -> None:
    assert _cycle(import_graph()) is None


def test_the_widgets_have_no_import_cycle() -> None:
    graph = {
        module: {target for target in targets if target.startswith("book.widgets")}
        for module, targets in import_graph().items()
        if module.startswith("book.widgets")
    }
    assert _cycle(graph) is None
    assert "book.widgets.table_view" not in graph["book.widgets.interactive"]


def test_a_cycle_is_found() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_the_bottom_layer_imports_only_itself() -> None:
    graph = import_graph()
    for module in BOTTOM:
        assert graph[module] <= set(BOTTOM), (module, graph[module] - set(BOTTOM))


def test_the_build_path_reads_regions_without_the_drift_checker() -> None:
    graph = import_graph()
    for module in (
        "book.builder",
        "book.units",
        "book.cells",
        "book.chapter",
        "book.stable",
        "book.toolchain",
    ):
        assert "book.sync" not in graph[module], module


def test_the_bottom_layer_loads_without_torch_or_the_drift_checker() -> None:
    code = (
        "import json, sys\n"
        "from book import regions\n"
        "found = regions.extension_regions()\n"
        "history = regions.all_regions()\n"
        "parts = regions.chapter_parts()\n"
        "loaded = [m for m in ('torch', 'book.sync', 'book.builder', 'book.cells') if m in sys.modules]\n"
        "print(json.dumps({'loaded': loaded, 'regions': len(found), 'parts': len(parts)}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=BOOK.parent
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["loaded"] == []
    assert report["regions"] > 0 and report["parts"] > 0
