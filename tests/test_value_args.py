"""A Python bool or int passed to a compiled function and used as a Python value (``for _
in range(n)``, ``if train:``) specialises the variant on that value, as torch.compile does:
each value traces its own variant, equal to eager; the call wrapper compares the value at
every call. (It raised "converting a traced tensor to a Python value" before.) A float used
that way still raises, naming the argument, and an ahead-of-time build refuses such a step."""

import warnings

import numpy as np
import pytest

import graphc as gc
from graphc import nn, optim

X = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)


def _model():
    gc.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.Tanh())


def test_int_argument_as_a_loop_count() -> None:
    m = _model()

    def body(x, n):
        for _ in range(n):
            x = m(x)
        return x

    f = gc.compile(body)
    for n in (1, 3, 2, 3, 1):
        np.testing.assert_allclose(f(X, n).numpy(), body(gc.tensor(X), n).detach().numpy(),
                                   rtol=1e-6, atol=1e-6)
    assert f.compile_count == 3


def test_bool_flag_argument_in_a_training_step_matches_eager() -> None:
    def run(compiled: bool) -> list[float]:
        m = _model()
        opt = optim.SGD(m.parameters(), lr=0.1)

        def step(x, clip=False):
            opt.zero_grad()
            loss = (m(x) ** 2).mean()
            loss.backward()
            if clip:
                nn.utils.clip_grad_norm_(m.parameters(), 0.01)
            opt.step()
            return loss

        fn = gc.compile(step) if compiled else step
        x = X if compiled else gc.tensor(X)
        out = [float(fn(x, clip=c).item()) for c in (False, True, True, False)]
        if compiled:
            assert fn.compile_count == 2
        return out + [float(v) for v in m[0].weight.detach().numpy().ravel()]

    np.testing.assert_allclose(run(True), run(False), rtol=1e-6, atol=1e-7)


def test_float_argument_used_as_a_python_value_still_raises() -> None:
    @gc.compile
    def f(x, s):
        return x * 2 if s > 0.5 else x

    with pytest.raises(RuntimeError, match="needs 's'"):
        f(X, 0.7)


def test_a_value_argument_changing_every_call_is_named() -> None:
    m = _model()
    f = gc.compile(lambda x, n: m(x) * n if n % 2 else m(x), max_variants=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(4):
            f(X, n)
    assert any("argument 'n', used as a Python value" in str(w.message) for w in caught)


def test_ahead_of_time_build_refuses_a_specialised_argument(tmp_path) -> None:
    m = _model()

    @gc.compile
    def f(x, n):
        for _ in range(n):
            x = m(x)
        return x

    f(X, 2)
    with pytest.raises(gc.aot.AOTError, match="as Python values"):
        gc.aot.build(f, (X, 2), str(tmp_path), "val")


def test_many_values_of_a_value_argument_warn_once() -> None:
    m = _model()
    f = gc.compile(lambda x, n: m(x) * float(n))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(10):
            f(X, n)
    msgs = [str(w.message) for w in caught if "uses as Python values" in str(w.message)]
    assert len(msgs) == 1 and "'n'" in msgs[0], msgs


@pytest.mark.parametrize("value", ["eval", None])
def test_string_and_none_arguments_raise_naming_the_argument(value) -> None:
    f = gc.compile(lambda x, mode: x * 2)
    with pytest.raises(TypeError, match="argument 'mode': (str|NoneType) is not supported "
                                        r"\(expected an array, a tensor, a number or a bool"):
        f(X, value)
