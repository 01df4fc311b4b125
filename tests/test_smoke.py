import numpy as np

import graphc as gc
from graphc import nn, optim


def test_eager_backward_accumulates():
    w = nn.Parameter(np.array([[0.5, -1.0]], np.float32))
    x = gc.tensor([[1.0, 2.0], [3.0, 4.0]])
    (x @ w.T).abs().mean().backward()
    np.testing.assert_allclose(w.grad.numpy(), [[-2.0, -3.0]])
    (x @ w.T).abs().mean().backward()
    np.testing.assert_allclose(w.grad.numpy(), [[-4.0, -6.0]])


def test_compiled_interp_seed_step_updates():
    gc.manual_seed(42)
    model = nn.Linear(1, 1)
    opt = optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.L1Loss()
    X = np.arange(0, 1, 0.02, dtype=np.float32)[:, None]
    y = 0.7 * X + 0.3

    @gc.compile(backend="interp")
    def step(x, t):
        loss = loss_fn(model(x), t)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    w0 = model.weight.numpy().copy()
    step(X, y)
    assert not np.array_equal(w0, model.weight.numpy())
    assert step.compile_count == 1
