"""A compiled step that updates a strided tensor in place (a transposed or sliced view of
another tensor, a Fortran-order parameter) writes through its memory, as eager does.

Regression: the runtime gave such a tensor a private C-order copy and wrote the step's
update there, so the view itself showed the new values but its base tensor (and every other
view of the same memory) kept the old ones, where eagerly they change too."""

from __future__ import annotations

import numpy as np
import pytest

import graphc as gc
from graphc import nn, optim

BACKENDS = ["cpu", "interp"]


def _view_run(compiled: bool, backend: str) -> tuple[np.ndarray, ...]:
    w = gc.arange(6, dtype=gc.float32).reshape(2, 3)
    v = w.t()
    col = w[:, 1]  # another view of the same memory

    def step(x):
        v.mul_(2.0).add_(x)
        return v.sum()

    f = gc.compile(step, dynamic=False, backend=backend) if compiled else step
    for _ in range(2):
        f(gc.ones(3, 2))
    return w.numpy().copy(), v.numpy().copy(), col.numpy().copy()


@pytest.mark.parametrize("backend", BACKENDS)
def test_in_place_ops_on_a_transposed_view_reach_its_base(backend):
    for eager, comp in zip(_view_run(False, backend), _view_run(True, backend)):
        np.testing.assert_array_equal(comp, eager)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_random_fill_of_an_outside_view_reaches_its_base(backend):
    w = gc.zeros(4, 3)
    v = w.t()

    @gc.compile(backend=backend)
    def f(x):
        v.normal_()
        return x.sum()

    f(gc.ones(2))
    np.testing.assert_array_equal(w.numpy(), v.numpy().T)
    assert np.all(w.numpy() != 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_fortran_order_parameter_trains_in_place(backend):
    """SGD on a Linear whose weight array is column-major: the step's updates land in that
    array (a view taken before the step sees them), and the values equal eager training."""
    def model():
        gc.manual_seed(0)
        m = nn.Linear(3, 2)
        w = np.asfortranarray(m.weight.detach().numpy())
        with gc.no_grad():
            m.weight.data = gc.from_numpy(w)
        return m

    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((5, 3)).astype(np.float32) for _ in range(3)]

    def train(compiled: bool) -> np.ndarray:
        m = model()
        row = m.weight.data[0]  # a view into the weight's memory
        opt = optim.SGD(m.parameters(), lr=0.1)

        def step(x):
            opt.zero_grad()
            loss = (m(x) ** 2).mean()
            loss.backward()
            opt.step()
            return loss

        f = gc.compile(step, backend=backend) if compiled else step
        for x in xs:
            f(gc.tensor(x))
        np.testing.assert_array_equal(row.numpy(), m.weight.detach().numpy()[0])
        return m.weight.detach().numpy().copy()

    np.testing.assert_allclose(train(True), train(False), rtol=1e-6, atol=1e-7)


def test_a_failed_step_leaves_the_strided_tensor_alone():
    w = gc.zeros(2, 3)
    v = w.t()
    idx = gc.tensor(np.array([0, 1], np.int64))

    @gc.compile(dynamic=False)
    def f(i):
        v.add_(1.0)
        return gc.ones(4)[i].sum()

    f(idx)
    before = w.numpy().copy()
    np.testing.assert_array_equal(before, np.ones((2, 3)))  # the first call reached w
    with pytest.raises(IndexError):
        f(gc.tensor(np.array([0, 9], np.int64)))
    np.testing.assert_array_equal(w.numpy(), before)
    np.testing.assert_array_equal(v.numpy(), before.T)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_strided_tensor_given_a_contiguous_array_is_written_in_place(backend):
    """The tensor a step updates is given another array between calls (``.data = ``): a
    contiguous one is written in place, and the buffer the strided one used is not copied
    over it afterwards."""
    p = gc.zeros(2, 3).t()  # strided: the step updates its own buffer, then copies back

    @gc.compile(dynamic=False, backend=backend)
    def f(x):
        p.add_(x)
        return p.sum()

    f(gc.ones(3, 2))
    np.testing.assert_array_equal(p.numpy(), np.ones((3, 2)))
    p.data = gc.full((3, 2), 10.0)
    f(gc.ones(3, 2))
    np.testing.assert_array_equal(p.numpy(), np.full((3, 2), 11.0))
    f(gc.ones(3, 2))
    np.testing.assert_array_equal(p.numpy(), np.full((3, 2), 12.0))
