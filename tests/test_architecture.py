"""The package's import graph: no import cycles, and modules import downwards only.

Every module of `clef_pipelines` is parsed with `ast` (nothing is imported). Each `import` and
`from ... import` counts, at the top of a module and inside functions alike (a deferred import
still ties the two modules together), and `from package import name` resolves `name` to the
submodule when it is one. A cycle is a strongly connected component of more than one module.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

PACKAGE = "clef_pipelines"
ROOT = Path(__file__).resolve().parents[1]


#: The layers, lowest first, by the package right below `clef_pipelines` (a module right in it
#: by its own name). A module may import its own layer and the ones below it. The settings
#: models of a subpackage (`<package>.config`) sit in the lowest layer, with `config.py` that
#: gathers them. Everything below the Dagster layer is the core, which never imports Dagster.
LAYERS: list[frozenset[str]] = [
    frozenset(
        {
            "_strict",
            "records",
            "pipeline_version",
            "child_signals",
            "privacy",
            "redact",
            "objectstore",
            "config",
            "config_file",
            "config_sections",
            "config_compact",
            "config_light",
            "config_light_spec",
            "urls",
            "config_deploy",
            "__init__",
        }
    ),
    frozenset({"parsing"}),
    frozenset({"chunking"}),
    frozenset({"embedding"}),
    frozenset({"stores"}),
    frozenset({"clef"}),
    frozenset({"guard"}),  # the offline guard at run time, which the screen uses
    frozenset({"steering"}),
    frozenset({"ingest"}),
    frozenset({"retrieval"}),
    frozenset({"evals"}),
    frozenset({"api", "integrations", "testing"}),
    frozenset({"resources", "assets", "jobs", "definitions", "config_doc", "deploy"}),
    frozenset({"cli", "__main__"}),
]
DAGSTER_LAYER = next(i for i, layer in enumerate(LAYERS) if "definitions" in layer)

#: Imports that reach up a layer today, each a small shared helper or error type living one
#: layer too high. A new upward import fails the test: move the shared piece down instead.
KNOWN_UPWARD_IMPORTS: frozenset[tuple[str, str]] = frozenset(
    {
        ("clef_pipelines.config", "clef_pipelines.stores._common"),
        ("clef_pipelines.config", "clef_pipelines.stores.base"),
        ("clef_pipelines.embedding.base", "clef_pipelines.stores.base"),
        ("clef_pipelines.embedding.executor", "clef_pipelines.clef.backends.ray_pool"),
        ("clef_pipelines.records", "clef_pipelines.ingest.metadata"),
        ("clef_pipelines.records", "clef_pipelines.stores.base"),
        ("clef_pipelines.steering.checks", "clef_pipelines.ingest.totals"),
        ("clef_pipelines.stores.config", "clef_pipelines.stores.text"),
        ("clef_pipelines.stores.lancedb_store", "clef_pipelines.ingest.process_memory"),
    }
)


def package_modules(root: Path = ROOT, package: str = PACKAGE) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package (a package by __init__)."""
    out: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _owner(name: str, modules: Mapping[str, object]) -> str | None:
    """The module `name` is, or the nearest package or module above it that is one of ours."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imported_modules(
    module: str, tree: ast.AST, modules: Mapping[str, object], *, is_package: bool
) -> set[str]:
    """The modules of ours that `module` imports anywhere in its code."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(o for a in node.names if (o := _owner(a.name, modules)))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                owner = sub if sub in modules else _owner(target, modules)
                if owner:
                    found.add(owner)
    found.discard(module)
    return found


def import_graph(root: Path = ROOT, package: str = PACKAGE) -> dict[str, set[str]]:
    modules = package_modules(root, package)
    return {
        name: imported_modules(
            name,
            ast.parse(path.read_text(encoding="utf-8"), str(path)),
            modules,
            is_package=path.name == "__init__.py",
        )
        for name, path in modules.items()
    }


def cycles(graph: Mapping[str, Iterable[str]]) -> list[frozenset[str]]:
    """Strongly connected components of more than one node (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, list[str]]] = [(start, sorted(graph.get(start, ())))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component: set[str] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def layer_of(module: str) -> int:
    parts = module.split(".")
    if len(parts) >= 3 and parts[-1] == "config":
        return 0
    top = parts[1] if len(parts) > 1 else "__init__"
    for i, layer in enumerate(LAYERS):
        if top in layer:
            return i
    raise AssertionError(f"{module}: its package {top!r} is in no layer; add it to LAYERS")


# --- the checks' own checks ----------------------------------------------------------------


def test_the_cycle_finder_finds_cycles_and_only_cycles() -> None:
    graph = {
        "a": {"b"},
        "b": {"c"},
        "c": {"a", "d"},  # a -> b -> c -> a
        "d": {"e"},
        "e": {"d"},  # d <-> e
        "f": {"a", "g"},
        "g": set(),
    }
    assert sorted(map(sorted, cycles(graph))) == [["a", "b", "c"], ["d", "e"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_imports_resolve_to_modules_at_any_depth(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import leaf\n")
    (pkg / "sub" / "leaf.py").write_text("def f():\n    from pkg.top import g\n")
    (pkg / "top.py").write_text("from pkg.sub import leaf\nimport pkg.sub\n")
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.sub"] == {"pkg.sub.leaf"}
    assert graph["pkg.sub.leaf"] == {"pkg.top"}  # a deferred import is an edge too
    assert graph["pkg.top"] == {"pkg.sub.leaf", "pkg.sub"}
    assert sorted(map(sorted, cycles(graph))) == [["pkg.sub", "pkg.sub.leaf", "pkg.top"]]


# --- the package ---------------------------------------------------------------------------


def test_no_import_cycles() -> None:
    graph = import_graph()
    found = [sorted(cycle) for cycle in cycles(graph)]
    assert not found, "import cycles (move the shared piece to a lower module):\n" + "\n".join(
        " <-> ".join(cycle) for cycle in found
    )


def test_modules_import_their_own_layer_or_below() -> None:
    graph = import_graph()
    upward = sorted(
        (module, target)
        for module, targets in graph.items()
        for target in targets
        if layer_of(target) > layer_of(module) and (module, target) not in KNOWN_UPWARD_IMPORTS
    )
    assert not upward, "imports that reach up a layer:\n" + "\n".join(
        f"{m} -> {t}" for m, t in upward
    )


def test_the_core_never_imports_dagster() -> None:
    offenders = []
    for module, path in package_modules().items():
        if layer_of(module) >= DAGSTER_LAYER:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            if any(n == "dagster" or n.startswith(("dagster.", "dagster_")) for n in names):
                offenders.append(module)
    assert not offenders, f"the core imports Dagster: {sorted(set(offenders))}"
