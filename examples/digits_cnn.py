"""A small CNN on scikit-learn's bundled 8x8 digits, the training step compiled by graphc.

``python examples/digits_cnn.py [--epochs N] [--no-torch]`` (also ``DIGITS_EPOCHS=N``).
Needs ``pip install -e ".[examples]"`` (scikit-learn; the data ships with it, no download).

The loop is PyTorch's: a ``DataLoader`` over a ``TensorDataset``, ``zero_grad`` / ``backward``
/ ``step`` inside the step, a learning-rate scheduler, an eval step under ``inference_mode``.
When PyTorch is installed the same model (same initial weights, same batches in the same
order) is trained in eager PyTorch next to it, so the two compare time and accuracy like for
like.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np

import graphc as gc
from graphc import nn, optim
from graphc.utils.data import DataLoader, TensorDataset

SEED = 0
BATCH = 32
LR = 5e-3
DEFAULT_EPOCHS = 15


def load() -> tuple[np.ndarray, ...]:
    """Digits as float32 NCHW images in [0, 1] and int64 labels, a fixed 80/20 split."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]  # (1797, 1, 8, 8)
    y = d.target.astype(np.int64)
    return tuple(train_test_split(x, y, test_size=0.2, random_state=SEED, stratify=y))


def build_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),  # 16x4x4
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),  # 32x2x2
        nn.Flatten(), nn.Linear(128, 10),
    )


def _torch_model(torch: Any, model: nn.Module) -> Any:
    tn = torch.nn
    tm = tn.Sequential(
        tn.Conv2d(1, 16, 3, padding=1), tn.ReLU(), tn.MaxPool2d(2),
        tn.Conv2d(16, 32, 3, padding=1), tn.ReLU(), tn.MaxPool2d(2),
        tn.Flatten(), tn.Linear(128, 10),
    )
    tm.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in
                        model.state_dict().items()})
    return tm


def train_graphc(data: tuple[np.ndarray, ...], epochs: int, verbose: bool = True
                 ) -> dict[str, Any]:
    x_train, x_test, y_train, y_test = data
    gc.manual_seed(SEED)
    model = build_model()
    init = {k: np.array(v) for k, v in model.state_dict().items()}
    loss_fn = nn.CrossEntropyLoss()
    opt = optim.Adam(model.parameters(), lr=LR)
    sched = optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)

    @gc.compile(example_args=(x_train[:BATCH], y_train[:BATCH]))
    def train_step(x: Any, y: Any) -> Any:
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    @gc.compile(example_args=(x_test,))
    def predict(x: Any) -> Any:
        with gc.inference_mode():
            return model(x).argmax(dim=1)

    loader = DataLoader(TensorDataset(x_train, y_train), batch_size=BATCH, shuffle=True,
                        generator=np.random.default_rng(SEED))
    history = []
    t0 = time.perf_counter()
    for epoch in range(epochs):
        model.train()
        total, n = 0.0, 0
        for xb, yb in loader:
            total += train_step(xb, yb).item() * len(yb)
            n += len(yb)
        sched.step()  # a new lr is a run-time input: no recompilation
        model.eval()
        acc = float((predict(x_test).numpy() == y_test).mean())
        history.append(acc)
        if verbose:
            print(f"graphc  epoch {epoch + 1:2d} | loss {total / n:.4f} | test acc {acc:.4f}")
    seconds = time.perf_counter() - t0
    return {"accuracy": history[-1], "history": history, "seconds": seconds, "init": init,
            "compiles": train_step.compile_count}


def train_torch(torch: Any, data: tuple[np.ndarray, ...], epochs: int,
                init: dict[str, np.ndarray], verbose: bool = True) -> dict[str, Any]:
    """The same loop in eager PyTorch: same weights, same batch order (same generator)."""
    x_train, x_test, y_train, y_test = data
    model = build_model()
    model.load_state_dict(init)
    tm = _torch_model(torch, model)
    loss_fn = torch.nn.CrossEntropyLoss()
    opt = torch.optim.Adam(tm.parameters(), lr=LR)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)
    loader = DataLoader(TensorDataset(x_train, y_train), batch_size=BATCH, shuffle=True,
                        generator=np.random.default_rng(SEED))
    tx_test = torch.from_numpy(x_test)
    history = []
    t0 = time.perf_counter()
    for epoch in range(epochs):
        tm.train()
        total, n = 0.0, 0
        for xb, yb in loader:
            opt.zero_grad()
            loss = loss_fn(tm(torch.from_numpy(xb)), torch.from_numpy(yb))
            loss.backward()
            opt.step()
            total += loss.item() * len(yb)
            n += len(yb)
        sched.step()
        tm.eval()
        with torch.inference_mode():
            acc = float((tm(tx_test).argmax(dim=1).numpy() == y_test).mean())
        history.append(acc)
        if verbose:
            print(f"pytorch epoch {epoch + 1:2d} | loss {total / n:.4f} | test acc {acc:.4f}")
    return {"accuracy": history[-1], "history": history, "seconds": time.perf_counter() - t0}


def main(epochs: int | None = None, use_torch: bool = True, verbose: bool = True
         ) -> dict[str, Any]:
    """Train (and compare); returns ``{"graphc": {...}, "torch": {...} or None}``."""
    if epochs is None:
        epochs = int(os.environ.get("DIGITS_EPOCHS", DEFAULT_EPOCHS))
    data = load()
    if verbose:
        print(f"digits: {len(data[0])} train / {len(data[1])} test images, batch {BATCH}, "
              f"Adam(lr={LR}) with cosine annealing, {epochs} epochs")
    t0 = time.perf_counter()
    g = train_graphc(data, epochs, verbose)
    g["total"] = time.perf_counter() - t0  # including tracing and compiling both steps
    out: dict[str, Any] = {"graphc": g, "torch": None}
    torch = None
    if use_torch:
        try:
            import torch

            torch.set_num_threads(1)
            torch.manual_seed(SEED)
        except ImportError:
            torch = None
    if torch is not None:
        out["torch"] = train_torch(torch, data, epochs, g["init"], verbose)
    if verbose:
        print(f"graphc : test accuracy {g['accuracy']:.4f}, training {g['seconds']:.2f} s "
              f"({g['total']:.2f} s including compilation)")
        t = out["torch"]
        if t is not None:
            print(f"pytorch: test accuracy {t['accuracy']:.4f}, training {t['seconds']:.2f} s "
                  f"(eager, 1 thread); time ratio pytorch/graphc {t['seconds'] / g['seconds']:.2f}")
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--no-torch", action="store_true")
    a = ap.parse_args()
    main(a.epochs, use_torch=not a.no_torch)
