"""The package's import graph: rooms in layers, imports flowing one way, no cycle.

Every import counts, function-local and `if TYPE_CHECKING:` ones included, since each
is a dependency a reader must know about. A room may import from its own room and from
rooms in lower layers only.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "mtkit"

# Lowest first. Rooms in one layer may not import each other.
LAYERS: list[set[str]] = [
    {"version", "errors"},
    {"files"},  # atomic writes, reading text: below every room that reads a file
    {"config", "progress", "runtime"},
    {"data"},
    {"document"},  # sentence splitting, placeholders, markup: text around a model
    {"model"},
    {"decode", "convert"},  # convert: importers of models trained elsewhere
    {"evaluate"},
    {"train"},
    {"report"},
    {"serve"},
    {"pipeline"},
    {"launch"},  # `mtkit train`'s job: the pipeline here, or under torchrun
    {"cli"},
    {"__main__", "__init__"},  # `python -m mtkit`, and the package root: the Python API
]
LAYER = {room: depth for depth, rooms in enumerate(LAYERS) for room in rooms}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, modules: set[str]) -> set[str]:
    """The mtkit modules `path` imports, resolved to modules (not names inside them)."""
    found = set()
    here = module_name(path).split(".") if PACKAGE in path.parents else ["mtkit", path.stem]
    package = here if path.name == "__init__.py" else here[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target:
                found.add(target)
    return found


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def import_graph() -> dict[str, set[str]]:
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return {module_name(p): imported_modules(p, modules) - {module_name(p)} for p in paths}


def test_every_room_has_a_layer() -> None:
    assert {room(m) for m in import_graph()} <= set(LAYER), "a new room needs its layer here"


def sideways_or_upward(graph: dict[str, set[str]]) -> list[str]:
    return [
        f"{module} ({room(module)}) imports {target} ({room(target)})"
        for module, targets in graph.items()
        for target in targets
        if room(target) != room(module) and LAYER[room(target)] >= LAYER[room(module)]
    ]


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> list[str]:
        state[module] = 1
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state:
                cycle = visit(target, path + [target])
                if cycle:
                    return cycle
        state[module] = 2
        return []

    for module in sorted(graph):
        if module not in state:
            cycle = visit(module, [module])
            if cycle:
                return cycle
    return []


def test_imports_only_flow_down_the_layers() -> None:
    assert not sideways_or_upward(import_graph()), "\n".join(sideways_or_upward(import_graph()))


def test_the_import_graph_has_no_cycle() -> None:
    assert find_cycle(import_graph()) == []


def test_the_scan_sees_function_local_and_type_checking_imports(tmp_path: Path) -> None:
    graph = import_graph()
    assert "mtkit.runtime.logs" in graph["mtkit.serve.server"]  # imported inside a function
    assert "mtkit.decode.translate" in graph["mtkit"]  # inside the root's __getattr__
    source = tmp_path / "mod.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                      "    from mtkit.cli import app\n", encoding="utf-8")
    assert imported_modules(source, {"mtkit.cli"}) == {"mtkit.cli"}


def test_the_rules_catch_an_upward_import_and_a_cycle() -> None:
    graph = {"mtkit.data.batching": {"mtkit.decode.search"}, "mtkit.decode.search": set()}
    assert sideways_or_upward(graph) == [
        "mtkit.data.batching (data) imports mtkit.decode.search (decode)"]
    graph = {"mtkit.data.a": {"mtkit.data.b"}, "mtkit.data.b": {"mtkit.data.a"}}
    assert find_cycle(graph) == ["mtkit.data.a", "mtkit.data.b", "mtkit.data.a"]
