"""The tree's layers, checked on the package's source: no import cycle (imports inside functions
count), no import that runs up the layers, back ends that never import each other, nothing inside
the package that imports tensorpack's ``utils`` face or an old module path, and a root that holds
only the core, the entry points and the framework faces.

The layers, bottom up, are drawn in ``dataflow/__init__.py``'s docstring; :data:`LAYERS` is the
same map. A module may import its own layer and the layers below it. Folders of one layer are
peers: they do not import each other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from dataflow import _legacy

SRC = Path(__file__).resolve().parents[1] / "src" / "dataflow"

#: the root's modules: the core protocol, then the entry points and the framework faces
CORE = {"base", "state", "rng", "_global_rng", "errors", "validation", "policy", "sources",
        "sharding", "profiler", "profile_stats", "_optional", "_version"}
TOP = {"__init__", "__main__", "demo", "torch", "jax", "_legacy"}
#: folder (or root group) -> its layer; a higher number may import a lower one
LAYERS = {"core": 0, "jpeg": 1, "imgaug": 2, "wrappers": 3, "parallel": 4, "serialize": 5,
          "streaming": 6, "snapshot": 6, "dataset": 7, "ray": 7, "input_source": 7, "service": 8,
          "top": 9, "utils": 10}
#: the parallel engine's back ends: each imports the shared engine modules, never another
#: back end (nor tuning, which builds them)
BACK_ENDS = {"dataflow.parallel.thread", "dataflow.parallel.process", "dataflow.parallel.zmq_map",
             "dataflow.parallel.zmq_runner", "dataflow.parallel.remote",
             "dataflow.parallel.plasma", "dataflow.ray.map", "dataflow.ray.runner"}


def _modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    for path in SRC.rglob("*.c"):  # the C extensions' modules, named by their sources
        if path.stem.endswith("module"):
            parts = list(path.relative_to(SRC.parent).parts[:-1])
            out[".".join([*parts, path.stem[: -len("module")]])] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str:
    """The package module that the import of ``name`` loads (the longest known prefix)."""
    while name not in MODULES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def _imports(module: str) -> dict[str, int]:
    """``{imported dataflow module: line}`` for every import in ``module``, at any depth."""
    path = MODULES[module]
    if path.suffix != ".py":
        return {}
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                     for a in node.names]
        for name in names:
            if name == "dataflow" or name.startswith("dataflow."):
                found.setdefault(name, node.lineno)
    return found


GRAPH = {m: _imports(m) for m in MODULES}


def _layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "top"
    if len(parts) == 2 and MODULES[module].parent == SRC:
        return "core" if parts[1] in CORE else "top"
    return parts[1]


def test_the_root_holds_only_the_core_the_entry_points_and_the_faces():
    root = {p.stem for p in SRC.glob("*.py")}
    assert root == CORE | TOP, root ^ (CORE | TOP)
    assert sorted(p.name for p in SRC.iterdir() if p.suffix in (".c", ".h")) == []
    folders = {p.name for p in SRC.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == set(LAYERS) - {"core", "top"}, folders ^ (set(LAYERS) - {"core", "top"})


def test_every_folder_and_root_module_has_a_layer():
    assert {_layer(m) for m in MODULES} <= set(LAYERS)


def test_no_import_cycles_even_through_imports_inside_functions():
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in (_resolve(n) for n in GRAPH[v]):
            if w == v or w not in GRAPH:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(GRAPH):
        if module not in index:
            visit(module)
    assert cycles == []


def _violations() -> list[str]:
    out = []
    for module, imported in sorted(GRAPH.items()):
        mine = _layer(module)
        for name, line in sorted(imported.items()):
            if _legacy.real_name(name) is not None:
                out.append(f"{module}:{line} imports the old path {name}")
                continue
            target = _resolve(name)
            theirs = _layer(target)
            if theirs == "utils" and mine != "utils":
                out.append(f"{module}:{line} imports tensorpack's utils face ({name})")
            elif mine != theirs and LAYERS[theirs] >= LAYERS[mine]:
                out.append(f"{module}:{line} ({mine}) imports {name} ({theirs}), a layer "
                           f"{'above' if LAYERS[theirs] > LAYERS[mine] else 'beside'} it")
    return out


def test_no_module_imports_above_or_beside_its_layer():
    assert _violations() == []


@pytest.mark.parametrize("module", sorted(BACK_ENDS))
def test_a_back_end_imports_only_the_engine(module):
    imported = {_resolve(n) for n in GRAPH[module]}
    assert imported & (BACK_ENDS | {"dataflow.parallel.tuning"}) == set()
    assert imported & {m for m in MODULES if m.startswith("dataflow.parallel.")}  # (found it)


def test_the_walk_sees_imports_inside_functions():
    # the image flows import the augmentors only inside functions (import dataflow stays light)
    assert "dataflow.imgaug" in GRAPH["dataflow.wrappers.image"]
    assert "dataflow.jpeg._jpeg" in {_resolve(n) for n in GRAPH["dataflow.jpeg"]}
