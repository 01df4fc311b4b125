"""JAX (jit + optax) versions of the benchmark steps, when JAX is installed.

Each function returns a zero-argument callable that runs one jitted training step on the same
arrays (and blocks until it is done), with the optimizer PyTorch's options correspond to:
SGD weight decay as ``add_decayed_weights`` before ``sgd(momentum)`` (PyTorch adds ``wd*p`` to
the gradient before the momentum buffer), Adam as ``optax.adam``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def available() -> bool:
    try:
        import jax  # noqa: F401
        import optax  # noqa: F401
    except ImportError:
        return False
    return True


def _mlp_params(dims: list[int], seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for i, o in zip(dims[:-1], dims[1:]):
        bound = 1 / np.sqrt(i)
        out.append((rng.uniform(-bound, bound, (o, i)).astype(np.float32),
                    rng.uniform(-bound, bound, (o,)).astype(np.float32)))
    return out


def mlp_step(dims: list[int], batch: int, opt: str, train: bool = True) -> Callable[[], Any]:
    import jax
    import jax.numpy as jnp
    import optax

    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((batch, dims[0])).astype(np.float32))
    y = jnp.asarray(rng.integers(0, dims[-1], batch).astype(np.int32))
    params = [(jnp.asarray(w), jnp.asarray(b)) for w, b in _mlp_params(dims)]

    def forward(ps: Any, xb: Any) -> Any:
        h = xb
        for k, (w, b) in enumerate(ps):
            h = h @ w.T + b
            if k < len(ps) - 1:
                h = jax.nn.relu(h)
        return h

    if not train:
        f = jax.jit(forward)
        return lambda: f(params, x).block_until_ready()
    if opt == "adam":
        tx = optax.adam(1e-3)
    elif opt == "sgd_small":
        tx = optax.chain(optax.add_decayed_weights(1e-4), optax.sgd(1e-3, momentum=0.9))
    else:
        tx = optax.sgd(1e-3, momentum=0.9)

    def loss_fn(ps: Any, xb: Any, yb: Any) -> Any:
        return optax.softmax_cross_entropy_with_integer_labels(forward(ps, xb), yb).mean()

    return _jit_train(loss_fn, tx, params, x, y)


def _jit_train(loss_fn: Callable, tx: Any, params: Any, x: Any, y: Any) -> Callable[[], Any]:
    """One jitted step (value_and_grad, the optax update) over (params, optimizer state),
    called with the same batch each time and blocking until the loss is ready."""
    import jax
    import optax

    state = {"p": params, "o": tx.init(params)}

    @jax.jit
    def step(ps: Any, os: Any, xb: Any, yb: Any) -> Any:
        loss, g = jax.value_and_grad(loss_fn)(ps, xb, yb)
        upd, os = tx.update(g, os, ps)
        return optax.apply_updates(ps, upd), os, loss

    def run() -> Any:
        state["p"], state["o"], loss = step(state["p"], state["o"], x, y)
        return loss.block_until_ready()

    return run


def seed_step() -> Callable[[], Any]:
    import jax
    import jax.numpy as jnp
    import optax

    X = np.arange(0, 1, 0.02, dtype=np.float32)[:40, None]
    x, y = jnp.asarray(X), jnp.asarray(0.7 * X + 0.3)
    params = {"w": jnp.asarray([[0.7645]], jnp.float32), "b": jnp.asarray([0.83], jnp.float32)}
    tx = optax.sgd(0.01)
    state = {"p": params, "o": tx.init(params)}

    @jax.jit
    def step(ps: Any, os: Any) -> Any:
        def loss_fn(q: Any) -> Any:
            return jnp.abs(x @ q["w"].T + q["b"] - y).mean()

        loss, g = jax.value_and_grad(loss_fn)(ps)
        upd, os = tx.update(g, os, ps)
        return optax.apply_updates(ps, upd), os, loss

    def run() -> Any:
        state["p"], state["o"], loss = step(state["p"], state["o"])
        return loss.block_until_ready()

    return run


def cnn_step(batch: int = 64) -> Callable[[], Any]:
    """Conv(1->8,3,p1)-ReLU-MaxPool2-Conv(8->16,3,p1)-ReLU-MaxPool2-Flatten-Linear(784,10),
    NCHW as in PyTorch, ``lax.conv_general_dilated`` and ``lax.reduce_window``."""
    import jax
    import jax.numpy as jnp
    import optax

    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((batch, 1, 28, 28)).astype(np.float32))
    y = jnp.asarray(rng.integers(0, 10, batch).astype(np.int32))

    def uni(shape: tuple, fan_in: int) -> Any:
        b = 1 / np.sqrt(fan_in)
        return jnp.asarray(rng.uniform(-b, b, shape).astype(np.float32))

    params = {"c1w": uni((8, 1, 3, 3), 9), "c1b": uni((8,), 9),
              "c2w": uni((16, 8, 3, 3), 72), "c2b": uni((16,), 72),
              "lw": uni((10, 784), 784), "lb": uni((10,), 784)}
    dn = ("NCHW", "OIHW", "NCHW")

    def conv(h: Any, w: Any, b: Any) -> Any:
        out = jax.lax.conv_general_dilated(h, w, (1, 1), ((1, 1), (1, 1)),
                                           dimension_numbers=dn)
        return out + b[None, :, None, None]

    def pool(h: Any) -> Any:
        return jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2),
                                     "VALID")

    def loss_fn(ps: Any, xb: Any, yb: Any) -> Any:
        h = pool(jax.nn.relu(conv(xb, ps["c1w"], ps["c1b"])))
        h = pool(jax.nn.relu(conv(h, ps["c2w"], ps["c2b"])))
        logits = h.reshape(h.shape[0], -1) @ ps["lw"].T + ps["lb"]
        return optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean()

    return _jit_train(loss_fn, optax.sgd(1e-2, momentum=0.9), params, x, y)


def steps() -> dict[str, Callable[[], Any]]:
    """JAX steps by workload name (only those with a JAX counterpart)."""
    return {
        "seed": seed_step(),
        "mlp_small": mlp_step([784, 256, 10], 64, "sgd_small"),
        "mlp_large": mlp_step([784, 1024, 1024, 10], 256, "sgd"),
        "infer": mlp_step([784, 256, 10], 64, "sgd_small", train=False),
        "cnn": cnn_step(),
        "adam": mlp_step([784, 256, 10], 64, "adam"),
    }
