"""The ``graphc.aot`` package itself: its module structure, its C templates and their
agreement with ``codegen/abi.py``, and that the C files ship in the wheel.

(What the generated libraries *do* is tests/test_aot.py's subject.)
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from graphc.codegen import abi

import graphc as gc
from graphc.aot import templates

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "graphc" / "aot"
C_DIR = PKG / "c"
TEMPLATES = sorted(p.name for p in C_DIR.iterdir() if p.suffix in (".c", ".h"))


def _imports(path: Path, module: str) -> set[str]:
    """Every module ``path`` imports (top level and inside functions), absolute names."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            out.add(prefix)
            out.update(f"{prefix}.{a.name}" for a in node.names)  # `from . import x`
    return out


def test_the_submodules_import_each_other_without_a_cycle() -> None:
    mods = {("graphc.aot" if p.name == "__init__.py" else f"graphc.aot.{p.stem}"): p
            for p in PKG.glob("*.py")}
    graph = {m: sorted(i for i in _imports(p, m) if i in mods and i != m)
             for m, p in mods.items()}
    for m, deps in graph.items():
        if m != "graphc.aot":
            assert "graphc.aot" not in deps, f"{m} imports the package it belongs to"
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        if state.get(m) == 2:
            return
        assert state.get(m) != 1, f"import cycle: {' -> '.join(path + [m])}"
        state[m] = 1
        for d in graph[m]:
            visit(d, path + [m])
        state[m] = 2

    for m in graph:
        visit(m, [])
    assert {"graphc.aot.builder", "graphc.aot.csource", "graphc.aot.model",
            "graphc.aot.templates"} <= set(graph)


def test_every_module_says_what_it_is_for() -> None:
    for p in PKG.glob("*.py"):
        doc = ast.get_docstring(ast.parse(p.read_text()))
        assert doc and len(doc) > 40, f"{p.name} has no module docstring"


def test_the_public_names_still_resolve() -> None:
    for name in gc.aot.__all__:
        assert getattr(gc.aot, name) is not None
    names = ["AOTError", "AotModel", "StateTensor", "TargetError", "build", "check_target",
             "describe", "llvm_catalog", "save_state", "Arg", "Hyper", "target_machine"]
    space: dict[str, object] = {}
    exec(f"from graphc.aot import {', '.join(names)}", space)  # as user code spells it
    assert all(n in space for n in names)
    assert gc.aot_c is sys.modules["graphc.aot.csource"]  # the module's old name


@pytest.mark.parametrize("name", TEMPLATES)
def test_each_template_is_read_as_package_data_and_its_markers_are_known(name: str) -> None:
    text = templates.read(name)
    assert "//@" not in text  # template notes are dropped
    assert text.endswith("\n")
    got = templates.markers(name)
    assert all(re.fullmatch(r"[A-Z][A-Z0-9_]*", m) for m in got)
    values = {m: "x" for m in got if m not in templates.ABI_VALUES}
    out = templates.render(name, **values)
    assert not templates.MARKER.search(out)


def test_render_refuses_missing_and_unused_values() -> None:
    with pytest.raises(templates.TemplateError, match="NAME"):
        templates.render("checkpoint_io.c")
    with pytest.raises(templates.TemplateError, match="BOGUS"):
        templates.render("checkpoint_io.c", NAME="m", BOGUS=1)


def test_abi_constants_come_from_codegen_abi() -> None:
    assert templates.ABI_VALUES == {k: str(getattr(abi, k)) for k in templates.ABI_VALUES}
    wrapper = templates.read("wrapper.c")
    # the kernel's error words and return codes are spelled through the ABI markers only
    assert "int64_t err[@ERR_WORDS@]" in wrapper and "last_err[@ERR_WORDS@]" in wrapper
    for key in ("ERR_INDEX", "ERR_SCRATCH", "ERR_NONFINITE", "ERR_BOUNDS", "ERR_OK"):
        assert f"@{key}@" in wrapper
    assert not re.search(r"\brc [!=]= \d", wrapper)
    assert not re.search(r"\b(err|last_err)\[\d+\]", wrapper)
    assert "int64_t info[@ERR_WORDS@]);" in templates.read("step.h")  # NAME_last_error
    csource = (PKG / "csource.py").read_text()
    assert "TABLE_FIXED" in csource and not re.search(r"\b4 \+ n_in", csource)


def test_the_public_error_codes_are_defined_once() -> None:
    where = [p.name for p in [*C_DIR.iterdir(), *PKG.glob("*.py")]
             if "#define GRAPHC_E" in p.read_text()]
    assert where == ["graphc_aot.h"]
    codes = dict(re.findall(r"#define (GRAPHC_E\w+) (\d+)", templates.read("graphc_aot.h")))
    assert len(codes) == 10 and len(set(codes.values())) == 10
    assert "GRAPHC_OK 0" in templates.read("graphc_aot.h")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from a copy of the sources (the working tree gets no build files)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for item in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / item, src / item)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.o")
    for item in ("graphc", "passes", "codegen"):
        shutil.copytree(ROOT / item, src / item, ignore=ignore)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                        "--no-build-isolation", "-q", "-w", str(tmp / "dist"), str(src)],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        pytest.skip(f"pip wheel is not available here: {r.stderr.strip()[-300:]}")
    (built,) = (tmp / "dist").glob("graphc-*.whl")
    return built


def test_the_wheel_ships_the_c_files(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for t in TEMPLATES:
        assert f"graphc/aot/c/{t}" in names, f"{t} is not in the wheel"
    for pkg in ("graphc/aot/", "graphc/ir/", "graphc/codegen/"):
        assert f"{pkg}__init__.py" in names, f"{pkg} is not in the wheel"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None, reason="no C compiler")
def test_an_installed_wheel_builds_a_step(wheel: Path, tmp_path: Path) -> None:
    """A non-editable install finds the C files (importlib.resources) and builds a library."""
    site = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q",
                        "--target", str(site), str(wheel)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    # an AOT build from the installed copy (not the working tree), in a clean directory
    script = f"""
import sys
sys.path.insert(0, {str(site)!r})
import numpy as np
import graphc as gc
from graphc import nn, optim
assert gc.__file__.startswith({str(site)!r}), gc.__file__
model = nn.Linear(2, 1)
opt = optim.SGD(model.parameters(), lr=0.1)
X = np.ones((4, 2), np.float32)

@gc.compile(example_args=(X, X[:, :1]))
def step(x, y):
    opt.zero_grad()
    loss = nn.MSELoss()(model(x), y)
    loss.backward()
    opt.step()
    return loss

paths = gc.aot.build(step, step.example_args, "out", "pkg")
assert "#define GRAPHC_EINDEX 2" in open(paths["header"]).read()
print("built", sorted(paths))
"""
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-c", script], cwd=work, capture_output=True,
                       text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (work / "out" / "libpkg.so").exists()
