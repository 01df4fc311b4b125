"""JAX (jit + optax) versions of the benchmark steps, when JAX is installed.

Each function returns a zero-argument callable that runs one jitted training step on the same
arrays (and blocks until it is done), with the optimizer PyTorch's options correspond to:
SGD weight decay as ``add_decayed_weights`` before ``sgd(momentum)`` (PyTorch adds ``wd*p`` to
the gradient before the momentum buffer), Adam as ``optax.adam``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
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


def resnet_step(state_dict: dict[str, Any], x: np.ndarray, y: np.ndarray, t_max: int = 1000,
                stem: str = "small", layout: str = "NHWC") -> Callable[[], Any]:
    """The ``resnet18`` workload's step (``benchmarks.resnet``'s architecture, basic or
    bottleneck blocks) in JAX: the
    network is read off ``state_dict`` (a graphc or PyTorch ResNet's, PyTorch key names), so
    it starts from the same weights and BatchNorm buffers. Training-mode BatchNorm as
    PyTorch's (biased batch variance to normalise, unbiased into ``running_var``, momentum
    0.1, ``num_batches_tracked`` counted), cross-entropy, SGD(momentum 0.9, weight decay
    5e-4 on every parameter) with PyTorch's CosineAnnealingLR over ``t_max`` steps
    (``optax.cosine_decay_schedule``: the same values, from the optimizer's step count).

    ``layout`` is the activations' layout inside the jitted step: ``"NHWC"`` (the default,
    and flax's: XLA's CPU convolutions run channels-last, so NCHW costs transposes around
    each one) or ``"NCHW"``; the input is converted once, outside the step. The returned
    callable runs one step and blocks until its loss is ready; ``.state`` holds the
    parameters, BatchNorm statistics and optimizer state, ``.loss_fn`` the jitted step's
    loss (for tests)."""
    import jax
    import jax.numpy as jnp
    import optax

    if layout not in ("NHWC", "NCHW"):
        raise ValueError(f"layout: expected 'NHWC' or 'NCHW', got {layout!r}")
    if stem not in ("small", "imagenet"):
        raise ValueError(f"stem: expected 'small' or 'imagenet', got {stem!r}")
    nhwc = layout == "NHWC"
    cax = 3 if nhwc else 1  # the channel axis
    red = (0, 1, 2) if nhwc else (0, 2, 3)
    dn = ("NHWC", "OIHW", "NHWC") if nhwc else ("NCHW", "OIHW", "NCHW")
    sd = {k: np.asarray(v) for k, v in state_dict.items()}
    stat_keys = tuple(k for k in sd if k.endswith(("running_mean", "running_var",
                                                   "num_batches_tracked")))
    params = {k: jnp.asarray(v, jnp.float32) for k, v in sd.items() if k not in stat_keys}
    stats = {k: jnp.asarray(sd[k]) for k in stat_keys}
    blocks = sorted({m.group(1) for k in sd if (m := re.match(r"(layer\d+\.\d+)\.", k))},
                    key=lambda b: tuple(int(t) for t in re.findall(r"\d+", b)))

    def chan(v: Any) -> Any:  # a per-channel vector broadcast over the activations
        return v if nhwc else v[:, None, None]

    def conv(h: Any, w: Any, stride: int, pad: int) -> Any:
        return jax.lax.conv_general_dilated(h, w, (stride, stride), ((pad, pad), (pad, pad)),
                                            dimension_numbers=dn)

    def bn(h: Any, ps: Any, st: Any, new: dict, name: str) -> Any:
        mean = h.mean(red)
        var = jnp.square(h - chan(mean)).mean(red)
        n = h.size // h.shape[cax]
        new[f"{name}.running_mean"] = 0.9 * st[f"{name}.running_mean"] + 0.1 * mean
        new[f"{name}.running_var"] = (0.9 * st[f"{name}.running_var"]
                                      + 0.1 * var * (n / (n - 1)))
        new[f"{name}.num_batches_tracked"] = st[f"{name}.num_batches_tracked"] + 1
        inv = jax.lax.rsqrt(var + 1e-5) * ps[f"{name}.weight"]
        return (h - chan(mean)) * chan(inv) + chan(ps[f"{name}.bias"])

    def forward(ps: Any, st: Any, xb: Any) -> tuple[Any, dict]:
        new: dict = {}
        if stem == "imagenet":
            h = jax.nn.relu(bn(conv(xb, ps["conv1.weight"], 2, 3), ps, st, new, "bn1"))
            window = (1, 3, 3, 1) if nhwc else (1, 1, 3, 3)
            strides = (1, 2, 2, 1) if nhwc else (1, 1, 2, 2)
            pads = ((0, 0), (1, 1), (1, 1), (0, 0)) if nhwc else ((0, 0), (0, 0), (1, 1), (1, 1))
            h = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, window, strides, pads)
        else:
            h = jax.nn.relu(bn(conv(xb, ps["conv1.weight"], 1, 1), ps, st, new, "bn1"))
        for b in blocks:
            stage, index = (int(t) for t in re.findall(r"\d+", b))
            stride = 2 if stage > 1 and index == 0 else 1  # as ``resnet.build``'s stages
            down = f"{b}.downsample.0.weight" in ps
            if f"{b}.conv3.weight" in ps:  # a bottleneck: 1x1, 3x3 with the stride, 1x1
                out = jax.nn.relu(bn(conv(h, ps[f"{b}.conv1.weight"], 1, 0), ps, st, new,
                                     f"{b}.bn1"))
                out = jax.nn.relu(bn(conv(out, ps[f"{b}.conv2.weight"], stride, 1), ps, st,
                                     new, f"{b}.bn2"))
                out = bn(conv(out, ps[f"{b}.conv3.weight"], 1, 0), ps, st, new, f"{b}.bn3")
            else:
                out = jax.nn.relu(bn(conv(h, ps[f"{b}.conv1.weight"], stride, 1), ps, st,
                                     new, f"{b}.bn1"))
                out = bn(conv(out, ps[f"{b}.conv2.weight"], 1, 1), ps, st, new, f"{b}.bn2")
            if down:
                h = bn(conv(h, ps[f"{b}.downsample.0.weight"], stride, 0), ps, st, new,
                       f"{b}.downsample.1")
            h = jax.nn.relu(out + h)
        h = h.mean((1, 2) if nhwc else (2, 3))
        return h @ ps["fc.weight"].T + ps["fc.bias"], new

    def loss_fn(ps: Any, st: Any, xb: Any, yb: Any) -> tuple[Any, dict]:
        logits, new = forward(ps, st, xb)
        return optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean(), new

    tx = optax.chain(optax.add_decayed_weights(5e-4),
                     optax.sgd(optax.cosine_decay_schedule(0.1, t_max), momentum=0.9))
    xb = jnp.asarray(x.transpose(0, 2, 3, 1) if nhwc else x)
    yb = jnp.asarray(y.astype(np.int32))

    @jax.jit
    def step(ps: Any, st: Any, os: Any) -> Any:
        (loss, new), g = jax.value_and_grad(loss_fn, has_aux=True)(ps, st, xb, yb)
        upd, os = tx.update(g, os, ps)
        return optax.apply_updates(ps, upd), new, os, loss

    state = {"p": params, "s": stats, "o": tx.init(params)}

    def run() -> Any:
        state["p"], state["s"], state["o"], loss = step(state["p"], state["s"], state["o"])
        return loss.block_until_ready()

    run.state = state  # type: ignore[attr-defined]
    return run


def resnet_workload_step(batch: int = 32, size: int = 64, **net: Any) -> Callable[[], Any]:
    """The JAX step of a ResNet workload (``resnet18``, ``resnet18_imagenet``, ``resnet50``;
    ``net``: ``benchmarks.resnet.build``'s keyword arguments, e.g. ``resnet.IMAGENET``),
    from a graphc ResNet's initial weights and the workload's data (the same seed, so the
    same arrays)."""
    import graphc

    from . import resnet

    rng = np.random.default_rng(0)
    chans = net.get("in_channels", resnet.IN_CHANNELS)
    classes = net.get("num_classes", resnet.NUM_CLASSES)
    x = rng.standard_normal((batch, chans, size, size)).astype(np.float32)
    y = rng.integers(0, classes, batch).astype(np.int64)
    gm = resnet.build(graphc.nn, **net)
    return resnet_step(gm.state_dict(), x, y, stem=net.get("stem", "small"))


def steps(names: Collection[str] | None = None) -> dict[str, Callable[[], Any]]:
    """JAX steps by workload name (only those with a JAX counterpart; of those, only
    ``names`` when given, so a run of one workload does not build the others)."""
    from . import resnet

    makers: dict[str, Callable[[], Callable[[], Any]]] = {
        "seed": seed_step,
        "mlp_small": lambda: mlp_step([784, 256, 10], 64, "sgd_small"),
        "mlp_large": lambda: mlp_step([784, 1024, 1024, 10], 256, "sgd"),
        "infer": lambda: mlp_step([784, 256, 10], 64, "sgd_small", train=False),
        "cnn": cnn_step,
        "adam": lambda: mlp_step([784, 256, 10], 64, "adam"),
        "resnet18": resnet_workload_step,
        "resnet18_imagenet": lambda: resnet_workload_step(8, 224, num_classes=1000,
                                                   **resnet.IMAGENET),
        "resnet50": lambda: resnet_workload_step(8, 224, num_classes=1000, **resnet.RESNET50),
    }
    return {k: make() for k, make in makers.items() if names is None or k in names}
