"""The house's shape: subpackages import each other (at module level) without a circle, and no module grows
past what one reader holds in mind."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import evokernel

PACKAGE = Path(evokernel.__file__).parent
MAX_MODULE_LINES = 400


def _room(module: str) -> str:
    """evokernel.harness.check -> harness; evokernel.config -> config."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def module_level_imports() -> dict[str, set[str]]:
    """Room -> the other rooms its modules import when they are imported (imports inside functions, made
    late so that a light command does not load a heavy layer, are not edges)."""
    edges: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("evokernel."):
                targets = [node.module]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names if alias.name.startswith("evokernel.")]
            else:
                continue
            edges.setdefault(_room(module), set()).update(_room(t) for t in targets if _room(t) != _room(module))
    return edges


def test_the_rooms_import_each_other_without_a_circle():
    graph = module_level_imports()
    order = list(graphlib.TopologicalSorter(graph).static_order())  # raises CycleError on a circle
    assert order.index("source") < order.index("harness") < order.index("mutations") < order.index("search")
    assert not any("cli" in rooms for rooms in graph.values()) and not graph.get("source") and not graph.get("errors")


def test_a_circle_would_be_found():
    graph = {"a": {"b"}, "b": {"a"}}
    try:
        list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError:
        return
    raise AssertionError("no circle found in a graph that has one")


def test_no_module_is_longer_than_a_reader_holds_in_mind():
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}
