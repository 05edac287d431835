"""The package's structure: no import cycles in specdec_core (lazy and typing-only imports
count too: a cycle hidden inside a function is still a cycle in the design)."""
import ast
from pathlib import Path

import specdec_core

ROOT = Path(specdec_core.__file__).parent


def _modules() -> dict:
    mods = {}
    for path in ROOT.rglob("*.py"):
        parts = ("specdec_core",) + path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = path
    return mods


def import_graph() -> dict:
    """{module: set of specdec_core modules it imports anywhere in its source}."""
    mods = _modules()
    graph = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
                base = package
                for _ in range(node.level - 1):
                    base = base.rsplit(".", 1)[0]
                module = (f"{base}.{node.module}" if node.module else base) if node.level else node.module
                edges |= {f"{module}.{a.name}" if f"{module}.{a.name}" in mods else module for a in node.names}
        graph[name] = {m for m in edges if m in mods and m != name}
    return graph


def cycles(graph: dict) -> list:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v), on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while not comp or comp[-1] != v:
                comp.append(stack.pop())
                on.discard(comp[-1])
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_detector_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_specdec_core_has_no_import_cycle():
    graph = import_graph()
    assert len(graph) > 50 and "specdec_core.trace.schema" in graph["specdec_core.trace"]
    assert cycles(graph) == []


def app_imports() -> list:
    """(file, module, names) for every import of specdec_core in app/ and app.py, lazy ones too."""
    app_root = ROOT.parent
    found = []
    for path in [app_root / "app.py", *sorted((app_root / "app").rglob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found += [(path.name, a.name, ()) for a in node.names if a.name.split(".")[0] == "specdec_core"]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "specdec_core":
                found.append((path.name, node.module, tuple(a.name for a in node.names)))
    return found


def api_violations(imports: list) -> list:
    """Imports that reach past the public API: the app may import the names of specdec_core.__all__
    and anything of specdec_core.trace (the record it renders), nothing else of the core."""
    bad = []
    for file, module, names in imports:
        if module == "specdec_core.trace" or module.startswith("specdec_core.trace."):
            continue
        if module == "specdec_core" and names and all(n in specdec_core.__all__ for n in names):
            continue
        bad.append(f"{file}: from {module} import {', '.join(names) or '*'}")
    return bad


def test_the_api_check_catches_a_reach_past_the_api():
    assert api_violations([("x.py", "specdec_core.decoding.rule", ("accept_tree",)),
                           ("y.py", "specdec_core", ("start_decode",)), ("z.py", "specdec_core.costs", ())]) == [
        "x.py: from specdec_core.decoding.rule import accept_tree", "y.py: from specdec_core import start_decode",
        "z.py: from specdec_core.costs import *"]
    assert api_violations([("a.py", "specdec_core", ("load_pair", "Request")),
                           ("b.py", "specdec_core.trace.trees", ("node_depths",))]) == []


def test_the_app_uses_only_the_public_api_and_the_trace():
    """The seam (issue 37): the app calls specdec_core's public API and reads traces; it never
    reaches into the decoder, the drafters, the settings or the cost modules directly."""
    imports = app_imports()
    assert len(imports) > 20
    assert api_violations(imports) == []
    for name in specdec_core.__all__:
        assert hasattr(specdec_core, name), name


# The layers, top to bottom (docs/ARCHITECTURE.md): an import only points down this list. bench,
# lab and cli sit above it; the bottom row (settings, sampling, errors, …) below.
LAYERS = ("decoding", "models", "trace", "costs", "drafters", "registry", "kernels")
TOP = ("bench", "lab", "cli", "__main__")


def _layer(module: str) -> int:
    """A module's place: -1 above the layers (and the package's face), len(LAYERS) the bottom row."""
    part = module.split(".")[1] if "." in module else "__init__"
    if part in TOP or part == "__init__":
        return -1
    return LAYERS.index(part) if part in LAYERS else len(LAYERS)


def test_no_import_runs_back_up_the_layers():
    """Issue 60: trace/trees.derive_tests imported decoding.rule from inside a function, an arrow
    from the trace up to the decoder (no cycle of modules, so the cycle check let it pass)."""
    up = sorted(f"{a} -> {b}" for a, deps in import_graph().items() for b in deps
                if _layer(a) > _layer(b) >= 0 and a.split(".")[:2] != b.split(".")[:2])
    assert up == []
