"""A new user's first hour (issue 20, items 5, 7 and 8): the package's public names resolve
lazily, error messages say what was expected, and torch habits (``torch.compile`` options,
keyword arguments, numpy arrays, ``torch.Generator``) work or fail clearly."""

from __future__ import annotations

import ast
import inspect
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import graphc as gc
from graphc import nn, optim

ROOT = Path(__file__).resolve().parents[1]

# Every public attribute ``import graphc`` offered when graphc/__init__.py imported everything
# eagerly (functions, classes, dtypes and the submodules it happened to load).
OLD_PUBLIC_NAMES = [
    "CompiledFunction", "DType", "DebugBoundsError", "NonFiniteError", "Tensor", "abs", "aot",
    "api", "arange", "argmax", "as_tensor", "autograd", "bool", "cat", "checks", "clamp",
    "compile", "concat", "double", "dtypes", "enable_grad", "executable", "exp", "float",
    "float32", "float64", "from_numpy", "full", "gather", "inference_mode", "initial_seed",
    "int32", "int64", "interpreter", "ir", "is_grad_enabled", "load", "log", "log_softmax",
    "long", "manual_seed", "matmul", "maximum", "mean", "minimum", "nn", "no_grad", "ones",
    "ones_like", "ops", "optim", "passes", "rand", "randn", "random", "relu", "save",
    "serialization", "set_grad_enabled", "shapes", "sigmoid", "softmax", "sqrt", "stack", "sum",
    "tanh", "tensor", "tensor_ops", "to_array", "trace", "where", "zeros", "zeros_like",
    "__version__",
]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=_env(), timeout=300, check=False, cwd=ROOT)


# -- item 5: a lazy package ------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(set(gc.__all__) | set(OLD_PUBLIC_NAMES)))
def test_every_public_name_resolves(name):
    assert getattr(gc, name) is not None
    assert name in dir(gc) or name.startswith("__")


def test_public_names_are_what_they_were():
    assert callable(gc.tensor) and gc.tensor([1.0]).shape == (1,)
    import graphc.tensor  # noqa: F401  (the submodule: must not replace the factory)

    assert callable(gc.tensor) and gc.tensor is gc._core.tensor
    assert isinstance(gc.zeros(2), gc.Tensor)
    assert gc.float is gc.float32 and gc.long is gc.int64 and gc.concat is gc.cat
    assert gc.nn is nn and gc.optim is optim
    assert gc.compile is gc.api.compile
    from graphc import CompiledFunction, compile, no_grad  # noqa: F401,A004

    with pytest.raises(AttributeError, match="no attribute 'nosuch'"):
        gc.nosuch  # noqa: B018
    assert not hasattr(gc, "nosuch")


def test_lazy_table_matches_core():
    """``graphc/__init__.py`` lists the names ``graphc/_core.py`` provides (so it need not
    import it to know them): the two lists must agree, and everything ``_core`` defines at
    its top level is in its ``__all__``."""
    import graphc._core as core

    assert set(core.__all__) == set(gc._CORE_NAMES)
    tree = ast.parse(Path(core.__file__).read_text())
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    defined |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
                if isinstance(t, ast.Name)}
    assert {d for d in defined if not d.startswith("_")} - {"__all__"} <= set(core.__all__)


def test_import_graphc_is_light():
    proc = _run("import sys, graphc\nprint(' '.join(sorted(sys.modules)))")
    assert proc.returncode == 0, proc.stderr
    loaded = set(proc.stdout.split())
    assert not loaded & {"numpy", "sympy", "llvmlite", "graphc.tensor", "graphc.api"}


def _submodules() -> list[str]:
    names = [m.name for m in pkgutil.walk_packages(gc.__path__, "graphc.")
             if m.name != "graphc.__main__"]
    for pkg in ("passes", "codegen"):
        names.append(f"graphc.{pkg}")
        names += [f"graphc.{pkg}.{p.stem}" for p in sorted((ROOT / pkg).glob("*.py"))
                  if p.stem != "__init__"]
    return sorted(set(names))


@pytest.mark.slow
def test_every_submodule_imports_first():
    """Each submodule imported first (the package no longer imports them in a fixed order, so
    a cycle such as tensor <-> tensor_ops must work from either end). One interpreter runs all
    of them: before each, every ``graphc`` module is dropped from ``sys.modules``, so graphc's
    own import order starts afresh while numpy, sympy and llvmlite stay loaded (that keeps the
    test at a few seconds instead of a fresh interpreter per module)."""
    code = f"""
import importlib, sys, traceback
failures = []
for name in {_submodules()!r}:
    for key in [k for k in sys.modules if k == "graphc" or k.startswith("graphc.")]:
        del sys.modules[key]
    try:
        importlib.import_module(name)
        gc = sys.modules["graphc"]
        assert gc.tensor([1.0, 2.0]).sum().item() == 3.0
    except BaseException:
        failures.append(name + ": " + traceback.format_exc().strip().splitlines()[-1])
print("FAILURES", len(failures))
print("\\n".join(failures))
"""
    proc = _run(code)
    assert proc.returncode == 0, proc.stderr
    assert "FAILURES 0" in proc.stdout, proc.stdout


# -- item 7: error messages that say more ----------------------------------------------------

@pytest.mark.parametrize("fn", ["cross_entropy", "nll_loss"])
def test_class_labels_shaped_n_by_1_say_what_shape_was_expected(fn):
    import graphc.nn.functional as F

    x = gc.randn(4, 3)
    t = gc.zeros(4, 1, dtype=gc.long)
    with pytest.raises(ValueError, match="multi-target not supported") as info:
        getattr(F, fn)(x, t)
    msg = str(info.value)
    assert "target shape [4, 1]" in msg and "[4]" in msg and "target.squeeze(1)" in msg
    assert isinstance(info.value, RuntimeError)  # PyTorch's type, too


def test_target_shape_messages_mirror_pytorch():
    loss = nn.CrossEntropyLoss()
    with pytest.raises(ValueError, match=r"Expected target size \[4, 5\], got \[4, 1\]"):
        loss(gc.randn(4, 3, 5), gc.zeros(4, 1, dtype=gc.long))
    with pytest.raises(ValueError, match=r"Expected input batch_size \(4\) to match target "
                                         r"batch_size \(5\)"):
        loss(gc.randn(4, 3), gc.zeros(5, dtype=gc.long))
    assert loss(gc.randn(4, 3), gc.zeros(4, dtype=gc.long)).shape == ()


def test_class_target_shape_is_checked_in_a_compiled_step():
    model = nn.Linear(3, 2)

    @gc.compile(backend="interp")
    def step(x, y):
        return nn.functional.cross_entropy(model(x), y)

    with pytest.raises(ValueError, match="multi-target not supported"):
        step(np.ones((4, 3), np.float32), np.zeros((4, 1), np.int64))


def test_list_and_mask_indices_work_as_in_torch():
    x = gc.randn(4, 3)
    np.testing.assert_array_equal(x[[-1]].numpy(), x[-1:].numpy())
    np.testing.assert_array_equal(x[:, [0, 2]].numpy(), x.numpy()[:, [0, 2]])
    np.testing.assert_array_equal(x[x > 0].numpy(), x.numpy()[x.numpy() > 0])
    with pytest.raises(NotImplementedError, match="gc.where"):
        gc.compile(lambda t: t[t > 0])(x)


def test_eager_module_accepts_numpy_arrays():
    class GPTish(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(10, 4)

        def forward(self, idx, targets=None):
            b, t = idx.size()  # a tensor method: an int attribute on numpy arrays
            out = self.emb(idx)
            return out if targets is None else (out, targets.shape)

    m = GPTish()
    assert tuple(m(np.array([[1, 2, 3]])).shape) == (1, 3, 4)
    assert m(np.array([[1, 2, 3]]), targets=np.zeros(3))[1] == (3,)
    a = np.ones((2, 3), np.float32)
    lin = nn.Linear(3, 2)
    np.testing.assert_allclose(np.asarray(lin(a)), np.asarray(lin(gc.tensor(a))))


def test_compiled_module_forwards_attributes():
    m = nn.Sequential(nn.Linear(3, 2), nn.ReLU())
    cm = gc.compile(m, backend="interp")
    assert [id(p) for p in cm.parameters()] == [id(p) for p in m.parameters()]
    assert sorted(cm.state_dict()) == ["0.bias", "0.weight"]
    cm.eval()
    assert not m.training and not cm.training
    cm.train()
    assert m.training and cm.training
    assert cm._orig_mod is m and "parameters" in dir(cm)
    with gc.no_grad():
        out = cm(np.ones((4, 3), np.float32))
    assert tuple(out.shape) == (4, 2)
    with pytest.raises(AttributeError, match="nosuch"):
        cm.nosuch  # noqa: B018


def _orders(generator, epochs=2):
    from graphc.utils.data import DataLoader, TensorDataset

    dl = DataLoader(TensorDataset(np.arange(10)), batch_size=10, shuffle=True,
                    generator=generator)
    return [next(iter(dl))[0].tolist() for _ in range(epochs)]


def test_dataloader_accepts_generators():
    first = _orders(gc.Generator().manual_seed(0))
    assert first == _orders(gc.Generator().manual_seed(0)) and first[0] != first[1]
    assert gc.Generator().initial_seed() == 67280421310721
    for g in (np.random.default_rng(0), 3, np.random.RandomState(1), np.random.SeedSequence(2),
              np.random.PCG64(3)):
        assert sorted(_orders(g, 1)[0]) == list(range(10))
    with pytest.raises(TypeError, match="generator must be.*got builtins.str"):
        _orders("seed")


def test_dataloader_accepts_a_torch_generator():
    torch = pytest.importorskip("torch")
    first = _orders(torch.Generator().manual_seed(0))
    assert first == _orders(torch.Generator().manual_seed(0)) and first[0] != first[1]


# -- item 8: torch.compile's keywords, keyword arguments -------------------------------------

def _seed_step(**compile_kwargs):
    gc.manual_seed(0)
    model = nn.Linear(1, 1)
    loss_fn = nn.L1Loss()
    opt = optim.SGD(model.parameters(), lr=0.01)

    def train_step(x, y):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return gc.compile(train_step, **compile_kwargs), model


X = np.arange(0, 1, 0.02, dtype=np.float32)[:, None]
Y = 0.7 * X + 0.3


@pytest.mark.parametrize("mode", [None, "default", "reduce-overhead", "max-autotune",
                                  "max-autotune-no-cudagraphs"])
def test_torch_compile_keywords_are_accepted(mode):
    step, _ = _seed_step(mode=mode, fullgraph=True, dynamic=None, backend="inductor")
    step(X[:40], Y[:40])
    step(X[:8], Y[:8])
    assert step.compile_count == 1  # dynamic=None: the batch dimension is symbolic


def test_torch_compile_keywords_reject_what_has_no_meaning():
    f = lambda x: x  # noqa: E731
    with pytest.raises(ValueError, match="mode: expected one of .*'max-autotune'.*got 'fast'"):
        gc.compile(f, mode="fast")
    with pytest.raises(ValueError, match="backend: expected one of .*'inductor'.*'nvfuser'"):
        gc.compile(f, backend="nvfuser")
    with pytest.raises(TypeError, match="custom backends"):
        gc.compile(f, backend=lambda gm, inputs: gm)
    with pytest.raises(TypeError, match="fullgraph"):
        gc.compile(f, fullgraph="yes")
    with pytest.raises(ValueError, match="options: .*triton.cudagraphs"):
        gc.compile(f, options={"triton.cudagraphs": True})
    assert gc.compile(f, disable=True) is f
    assert gc.compile(disable=True)(f) is f
    assert gc.compile(f, options={"check_finite": True}).check_finite


def test_keyword_arguments_to_a_compiled_step():
    step, _ = _seed_step(backend="interp")
    ref, _ = _seed_step(backend="interp")
    a = step(x=X, y=Y).item()
    b = step(X, y=Y).item()
    c = step(y=Y, x=X).item()
    assert [a, b, c] == [ref(X, Y).item() for _ in range(3)]
    assert step.compile_count == 1
    with pytest.raises(TypeError, match=r"train_step\(\) got an unexpected keyword argument 'z'"):
        step(X, z=Y)
    with pytest.raises(TypeError, match=r"train_step\(\) got multiple values for argument 'x'"):
        step(X, x=X)
    with pytest.raises(TypeError, match=r"train_step\(\) missing 1 required positional "
                                        r"argument: 'x'"):
        step(y=Y)


def test_keyword_arguments_with_defaults():
    gc.manual_seed(0)
    model = nn.Linear(1, 1)

    @gc.compile(backend="interp")
    def evaluate(x, y, scale=2.0, offset=0.0):
        return ((model(x) - y).abs().mean() + offset) * scale

    with gc.no_grad():
        base = ((model(gc.tensor(X)) - gc.tensor(Y)).abs().mean()).item()
        assert evaluate(X, Y).item() == pytest.approx(2.0 * base)  # trailing defaults kept
        assert evaluate(x=X, y=Y, offset=1.0).item() == pytest.approx(2.0 * (base + 1.0))
        assert evaluate(X, Y, scale=3.0).item() == pytest.approx(3.0 * base)
    with pytest.raises(TypeError, match=r"evaluate\(\) missing 1 required positional "
                                        r"argument: 'y'"):
        evaluate(x=X, scale=1.0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'bias'"):
        evaluate(X, Y, bias=1.0)


def test_numpy_scalars_keep_their_dtype_as_in_torch():
    from _torch import torch

    for v in (np.float64(1.1), np.float32(1.5), np.int64(3), np.int32(3), 1.1, 3, True):
        assert gc.tensor(v).dtype.name == str(torch.tensor(v).dtype).removeprefix("torch."), v
    assert (gc.ones(2) * np.float64(2.0)).dtype is gc.float32  # scalars in ops do not widen


def test_public_functions_are_not_shadowed_by_submodules():
    """``gc.dot`` is ``torch.dot``'s counterpart even after every graphc submodule has been
    imported (a submodule of the same name would replace the attribute on import)."""
    import importlib

    for m in _submodules():
        importlib.import_module(m)
    import graphc._core as core

    for name in core.__all__:
        assert not inspect.ismodule(getattr(gc, name)), name
