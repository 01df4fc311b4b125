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
    state = {"p": params, "o": tx.init(params)}

    def loss_fn(ps: Any, xb: Any, yb: Any) -> Any:
        return optax.softmax_cross_entropy_with_integer_labels(forward(ps, xb), yb).mean()

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


def steps() -> dict[str, Callable[[], Any]]:
    """JAX steps by workload name (only those with a JAX counterpart)."""
    return {
        "seed": seed_step(),
        "mlp_small": mlp_step([784, 256, 10], 64, "sgd_small"),
        "mlp_large": mlp_step([784, 1024, 1024, 10], 256, "sgd"),
        "infer": mlp_step([784, 256, 10], 64, "sgd_small", train=False),
        "adam": mlp_step([784, 256, 10], 64, "adam"),
    }
