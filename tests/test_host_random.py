"""``random`` and ``numpy.random`` module functions inside a compiled function raise
``NotImplementedError`` (they used to run once at trace time, so every call reused the
number drawn then: an augmentation that silently stopped); outside traces, and after a
trace that raised, they are the original functions; graphc's own draws trace as usual."""

import random

import numpy as np
import pytest

import graphc as gc
from graphc import nn

X = np.ones((2, 4), np.float32)


@pytest.mark.parametrize("draw", [lambda: np.random.uniform(0.5, 1.5), lambda: np.random.rand(),
                                  lambda: random.random(), lambda: random.choice([1.0, 2.0])])
def test_host_random_draws_in_a_trace_raise(draw) -> None:
    gc.manual_seed(0)
    lin = nn.Linear(4, 3)
    before = lin.weight.detach().numpy().copy()

    @gc.compile
    def f(x):
        return lin(x) * draw()

    with pytest.raises(NotImplementedError, match="runs once, when the function is traced"):
        f(X)
    np.testing.assert_array_equal(lin.weight.detach().numpy(), before)
    assert np.random.uniform.__self__ is np.random.mtrand._rand  # the original again
    assert random.random.__self__ is random._inst
    draw()  # eagerly: fine


def test_graphc_draws_are_fresh_every_call() -> None:
    gc.manual_seed(0)

    @gc.compile
    def f(x):
        return x * gc.rand(1)

    a, b = f(X).numpy(), f(X).numpy()
    assert not np.array_equal(a, b)
