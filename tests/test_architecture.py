"""The layers point down: no import cycle anywhere, and no import that goes up a layer.

The import graph is read with ``ast`` from the sources (imports inside functions count: a lazy
import that goes back up is still a cycle; imports under ``if TYPE_CHECKING:`` do not, they
never run). The layers, bottom first:

    graphc.ir  <-  graphc.passes  <-  graphc.codegen  <-  graphc.runtime  <-  front end
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# where each installed package's sources are (pyproject's package-dir)
SOURCES = {"graphc": ROOT / "graphc", "graphc.passes": ROOT / "passes",
           "graphc.codegen": ROOT / "codegen"}
# modules below the front end that any layer may use: they import nothing of graphc's
BASE = ("graphc.autograd", "graphc._context")
FRONT_END = ("graphc.tensor", "graphc.tensor_ops", "graphc.engine", "graphc.trace",
             "graphc.nn", "graphc.optim", "graphc.api", "graphc._core", "graphc.executable",
             "graphc.interpreter", "graphc.checks", "graphc.serialization", "graphc.random",
             "graphc.distributed", "graphc.aot", "graphc.cli", "graphc.explain")


def _modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for pkg, d in SOURCES.items():
        for p in d.rglob("*.py"):
            rel = p.relative_to(d).with_suffix("")
            if pkg == "graphc" and rel.parts[0] in ("passes", "codegen"):
                continue  # symlinks some checkouts use for the installed layout
            parts = [x for x in rel.parts if x != "__init__"]
            mods[".".join([pkg, *parts])] = p
    return mods


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in node.body:
                for n in ast.walk(sub):
                    if hasattr(n, "lineno"):
                        lines.add(n.lineno)
    return lines


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        pkg = m if p.name == "__init__.py" else m.rsplit(".", 1)[0]
        tree = ast.parse(p.read_text())
        skip = _type_checking_lines(tree)
        for node in ast.walk(tree):
            if getattr(node, "lineno", None) in skip:
                continue
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in mods:
                        edges[m].add(a.name)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg.split(".")
                    base = base[:len(base) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                names_a_package_attr = False
                for a in node.names:
                    if f"{target}.{a.name}" in mods:
                        edges[m].add(f"{target}.{a.name}")
                    else:
                        names_a_package_attr = True
                if names_a_package_attr and target in mods:
                    edges[m].add(target)
    for m in edges:
        edges[m].discard(m)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def _under(mod: str, prefixes: tuple[str, ...]) -> bool:
    return any(mod == p or mod.startswith(p + ".") for p in prefixes)


GRAPH = import_graph()


def test_the_graph_is_read() -> None:
    assert "graphc.ir.graph" in GRAPH and "graphc.codegen.vmath" in GRAPH["graphc.codegen.emit"]


def test_no_import_cycle() -> None:
    assert cycles(GRAPH) == []


def test_cycle_detector_finds_cycles() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("layer,forbidden", [
    ("graphc.ir", ("graphc.passes", "graphc.codegen", "graphc.runtime") + FRONT_END),
    ("graphc.passes", ("graphc.codegen", "graphc.runtime") + FRONT_END),
    ("graphc.codegen", ("graphc.runtime",) + FRONT_END),
    ("graphc.runtime", ("graphc.nn", "graphc.optim", "graphc.api", "graphc.cli")),
])
def test_layers_import_only_downward(layer: str, forbidden: tuple[str, ...]) -> None:
    bad = sorted(f"{m} -> {t}" for m, ts in GRAPH.items() if _under(m, (layer,))
                 for t in ts if _under(t, forbidden))
    assert bad == []


def test_every_package_is_installed() -> None:
    """A plain (non-editable) install ships exactly the packages ``pyproject.toml`` lists:
    every folder with an ``__init__.py`` must be there."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
                 ["packages"])
    found = {m for m, p in _modules().items() if p.name == "__init__.py"}
    assert found == listed


def _absolute_imports(node: ast.AST) -> list[str]:
    """The modules an ``import`` or an absolute ``from ... import`` statement names."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module]
    return []


def test_scripts_import_the_installed_packages() -> None:
    """Tests, benchmarks and examples import ``graphc.codegen`` / ``graphc.passes``, never the
    source folders ``codegen`` / ``passes`` as top-level modules: those resolve only when the
    repository root is on ``sys.path`` (``python -m pytest`` puts it there, plain ``pytest``
    from a clean install, as CI runs it, does not)."""
    bad = []
    for folder in ("tests", "benchmarks", "examples", "scripts"):
        for p in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(p.read_text())):
                bad += [f"{p.relative_to(ROOT)}:{node.lineno} imports {n}"
                        for n in _absolute_imports(node) if n.split(".")[0] in ("codegen",
                                                                                 "passes")]
    assert bad == []


def test_tests_put_the_root_on_the_path_before_importing_benchmarks() -> None:
    """``benchmarks/`` is not installed either: a test module that imports it must put the
    repository root on ``sys.path`` first. Without that the import succeeds only when another
    module of the same worker happened to import ``benchmarks`` earlier."""
    bad = []
    for p in sorted((ROOT / "tests").glob("test_*.py")):
        tree = ast.parse(p.read_text())
        inserted = None
        for node in tree.body:  # module level, in order
            if inserted is None and "sys.path.insert" in ast.unparse(node):
                inserted = node.lineno
            mods = _absolute_imports(node)
            if any(m.split(".")[0] == "benchmarks" for m in mods) and inserted is None:
                bad.append(f"{p.relative_to(ROOT)}:{node.lineno}")
    assert bad == []
