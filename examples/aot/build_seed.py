"""Build the C libraries and data files for the AOT examples (``make`` runs this).

- ``seed_train`` / ``seed_test``: the seed example's training and test steps (linear
  regression, L1 loss, SGD lr=0.01), defined as in ``examples/seed_linreg.py`` with
  ``gc.manual_seed(42)``, so ``seed_main`` prints the same losses as that script;
- ``mlp``: mlp_small (784-256-ReLU-10), SGD with momentum (or Adam with ``--optimizer adam``),
  cross-entropy loss, trained by ``mlp_main`` on ``mlp_x.npy`` / ``mlp_y.npy``.

The factories below are also what ``tests/test_aot.py`` uses, so the C programs and the
Python reference run the very same step definitions.

Usage: ``python build_seed.py OUT_DIR [--target CPU] [--optimizer sgd|adam]``.
"""

from __future__ import annotations

import argparse
import os
import sys
from types import SimpleNamespace
from typing import Any

import numpy as np

import graphc as gc
from graphc import nn, optim


def seed_data() -> dict[str, np.ndarray]:
    """y = 0.7x + 0.3 on [0, 1) in steps of 0.02, split 80/20 (as the seed example)."""
    weight, bias = 0.7, 0.3
    X = np.arange(0, 1, 0.02, dtype=np.float32)[:, None]
    y = weight * X + bias
    split = int(0.8 * len(X))
    return {"X_train": X[:split], "y_train": y[:split], "X_test": X[split:],
            "y_test": y[split:]}


def make_seed() -> SimpleNamespace:
    """The seed example's model, loss, optimizer and compiled train/test steps."""
    gc.manual_seed(42)
    d = seed_data()

    class LinearRegressionModel(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear_layer = nn.Linear(in_features=1, out_features=1)

        def forward(self, x: Any) -> Any:
            return self.linear_layer(x)

    model = LinearRegressionModel()
    loss_fn = nn.L1Loss()
    optimizer = optim.SGD(params=model.parameters(), lr=0.01)

    @gc.compile(example_args=(d["X_train"], d["y_train"]))
    def train_step(x: Any, y: Any) -> Any:
        y_pred = model(x)
        loss = loss_fn(y_pred, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss

    @gc.compile(example_args=(d["X_test"], d["y_test"]))
    def test_step(x: Any, y: Any) -> Any:
        with gc.inference_mode():
            return loss_fn(model(x), y)

    return SimpleNamespace(model=model, optimizer=optimizer, train_step=train_step,
                           test_step=test_step, **d)


def cross_entropy() -> Any:
    """``nn.CrossEntropyLoss()`` where graphc has it, else the same loss from primitives
    (log-sum-exp minus the gathered target logit), which also range-checks the targets."""
    if hasattr(nn, "CrossEntropyLoss"):
        return nn.CrossEntropyLoss()

    def loss_fn(logits: Any, target: Any) -> Any:
        m = logits.max(1, keepdim=True)
        m = (m[0] if isinstance(m, tuple) else getattr(m, "values", m)).detach()
        z = logits - m
        lse = z.exp().sum(1).log()
        picked = gc.gather(z, 1, target.reshape(-1, 1)).reshape(-1)
        return (lse - picked).mean()

    return loss_fn


def mlp_data(n: int = 500, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Synthetic 10-class data with a linear teacher (learnable, deterministic)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 784)).astype(np.float32)
    teacher = rng.standard_normal((784, 10)).astype(np.float32)
    y = np.argmax(X @ teacher, axis=1).astype(np.int64)
    return X, y


def make_mlp(optimizer: str = "sgd", batch: int = 64) -> SimpleNamespace:
    """mlp_small: 784-256-ReLU-10 with SGD momentum 0.9 (lr 0.01) or Adam (lr 1e-3)."""
    gc.manual_seed(42)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    if optimizer == "adam":
        opt = optim.Adam(model.parameters(), lr=1e-3)
    else:
        opt = optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = cross_entropy()
    X, y = mlp_data()

    @gc.compile(example_args=(X[:batch], y[:batch]))
    def mlp_step(x: Any, target: Any) -> Any:
        opt.zero_grad()
        loss = loss_fn(model(x), target)
        loss.backward()
        opt.step()
        return loss

    return SimpleNamespace(model=model, opt=opt, step=mlp_step, X=X, y=y, batch=batch)


def build_all(out_dir: str, target: str | None = None, optimizer: str = "sgd"
              ) -> dict[str, dict[str, str]]:
    """Write the three libraries and the data files into ``out_dir``."""
    os.makedirs(out_dir, exist_ok=True)
    s = make_seed()
    for k in ("X_train", "y_train", "X_test", "y_test"):
        np.save(os.path.join(out_dir, f"seed_{k}.npy"), getattr(s, k))
    built = {
        "seed_train": gc.aot.build(s.train_step, s.train_step.example_args, out_dir,
                                   "seed_train", target),
        "seed_test": gc.aot.build(s.test_step, s.test_step.example_args, out_dir,
                                  "seed_test", target),
    }
    m = make_mlp(optimizer)
    np.save(os.path.join(out_dir, "mlp_x.npy"), m.X)
    np.save(os.path.join(out_dir, "mlp_y.npy"), m.y)
    built["mlp"] = gc.aot.build(m.step, m.step.example_args, out_dir, "mlp", target)
    return built


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--target", default=None, help="LLVM cpu name (default: this host)")
    ap.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd")
    a = ap.parse_args(argv)
    for name, paths in build_all(a.out_dir, a.target, a.optimizer).items():
        print(f"{name}: " + ", ".join(os.path.basename(p) for p in paths.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
