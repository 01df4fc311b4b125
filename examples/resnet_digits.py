"""A small ResNet on scikit-learn's bundled 8x8 digits upsampled to 32x32, the training step
compiled by graphc.

``python examples/resnet_digits.py [--epochs N] [--no-torch] [--subset N]`` (also
``DIGITS_EPOCHS=N``, ``DIGITS_SUBSET=N``: train on the first N training images only).
Needs ``pip install -e ".[examples]"`` (scikit-learn; the data ships with it, no download).

The network is the ResNet-18 layout of ``benchmarks/resnet.py`` at quarter widths (8-16-32-64,
two BasicBlocks per stage, BatchNorm, stride-2 1x1 downsampling, a 3x3 stem without max-pool,
global average pooling): residual blocks with BatchNorm, whose running statistics the eval
step uses. The images are upsampled by repeating each pixel 4x4 (``np.kron``), so the four
stages see 32x32, 16x16, 8x8 and 4x4 maps. Training is SGD with momentum and weight decay and a
cosine learning-rate schedule stepped once per epoch.

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
LR = 0.05
MOMENTUM, WEIGHT_DECAY = 0.9, 5e-4
WIDTHS = (8, 16, 32, 64)
UPSAMPLE = 4
DEFAULT_EPOCHS = 8


def load(subset: int | None = None) -> tuple[np.ndarray, ...]:
    """Digits as float32 NCHW 32x32 images in [0, 1] (each pixel repeated 4x4) and int64
    labels, a fixed 80/20 split; ``subset`` keeps the first N training images."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]  # (1797, 1, 8, 8)
    x = np.kron(x, np.ones((1, 1, UPSAMPLE, UPSAMPLE), np.float32))  # (1797, 1, 32, 32)
    y = d.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2,
                                                        random_state=SEED, stratify=y)
    if subset is not None:
        x_train, y_train = x_train[:subset], y_train[:subset]
    return x_train, x_test, y_train, y_test


def build_model(lib: Any = nn) -> Any:
    """The ResNet in ``lib`` (``graphc.nn`` or ``torch.nn``): the same code builds both."""

    class BasicBlock(lib.Module):
        def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
            super().__init__()
            self.conv1 = lib.Conv2d(inplanes, planes, 3, stride=stride, padding=1, bias=False)
            self.bn1 = lib.BatchNorm2d(planes)
            self.relu = lib.ReLU()
            self.conv2 = lib.Conv2d(planes, planes, 3, padding=1, bias=False)
            self.bn2 = lib.BatchNorm2d(planes)
            self.downsample = None
            if stride != 1 or inplanes != planes:
                self.downsample = lib.Sequential(
                    lib.Conv2d(inplanes, planes, 1, stride=stride, bias=False),
                    lib.BatchNorm2d(planes))

        def forward(self, x: Any) -> Any:
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            # out of place: graphc's eager mode loses in-place ops' derivatives on
            # intermediates, and the compiled step is the same either way
            return self.relu(self.bn2(self.conv2(out)) + identity)

    layers: list[Any] = [lib.Conv2d(1, WIDTHS[0], 3, padding=1, bias=False),
                         lib.BatchNorm2d(WIDTHS[0]), lib.ReLU()]
    cin = WIDTHS[0]
    for i, w in enumerate(WIDTHS):
        layers += [BasicBlock(cin, w, 1 if i == 0 else 2), BasicBlock(w, w)]
        cin = w
    layers += [lib.AdaptiveAvgPool2d(1), lib.Flatten(), lib.Linear(cin, 10)]
    return lib.Sequential(*layers)


def _torch_model(torch: Any, model: nn.Module) -> Any:
    tm = build_model(torch.nn)
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
    opt = optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
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
    history, epoch_seconds = [], []
    t0 = time.perf_counter()
    for epoch in range(epochs):
        te = time.perf_counter()
        model.train()
        total, n = 0.0, 0
        for xb, yb in loader:
            total += train_step(xb, yb).item() * len(yb)
            n += len(yb)
        sched.step()  # a new lr is a run-time input: no recompilation
        model.eval()
        acc = float((predict(x_test).numpy() == y_test).mean())
        history.append(acc)
        epoch_seconds.append(time.perf_counter() - te)
        if verbose:
            print(f"graphc  epoch {epoch + 1:2d} | loss {total / n:.4f} | test acc {acc:.4f} "
                  f"| {epoch_seconds[-1]:.2f} s")
    seconds = time.perf_counter() - t0
    return {"accuracy": history[-1], "history": history, "seconds": seconds, "init": init,
            "epoch_seconds": epoch_seconds, "compiles": train_step.compile_count}


def train_torch(torch: Any, data: tuple[np.ndarray, ...], epochs: int,
                init: dict[str, np.ndarray], verbose: bool = True) -> dict[str, Any]:
    """The same loop in eager PyTorch: same weights, same batch order (same generator)."""
    x_train, x_test, y_train, y_test = data
    model = build_model()
    model.load_state_dict(init)
    tm = _torch_model(torch, model)
    loss_fn = torch.nn.CrossEntropyLoss()
    opt = torch.optim.SGD(tm.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)
    loader = DataLoader(TensorDataset(x_train, y_train), batch_size=BATCH, shuffle=True,
                        generator=np.random.default_rng(SEED))
    tx_test = torch.from_numpy(x_test)
    history, epoch_seconds = [], []
    t0 = time.perf_counter()
    for epoch in range(epochs):
        te = time.perf_counter()
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
        epoch_seconds.append(time.perf_counter() - te)
        if verbose:
            print(f"pytorch epoch {epoch + 1:2d} | loss {total / n:.4f} | test acc {acc:.4f} "
                  f"| {epoch_seconds[-1]:.2f} s")
    return {"accuracy": history[-1], "history": history, "seconds": time.perf_counter() - t0,
            "epoch_seconds": epoch_seconds}


def main(epochs: int | None = None, use_torch: bool = True, verbose: bool = True,
         subset: int | None = None) -> dict[str, Any]:
    """Train (and compare); returns ``{"graphc": {...}, "torch": {...} or None}``."""
    if epochs is None:
        epochs = int(os.environ.get("DIGITS_EPOCHS", DEFAULT_EPOCHS))
    if subset is None and os.environ.get("DIGITS_SUBSET"):
        subset = int(os.environ["DIGITS_SUBSET"])
    data = load(subset)
    if verbose:
        print(f"digits 32x32: {len(data[0])} train / {len(data[1])} test images, batch "
              f"{BATCH}, ResNet widths {'-'.join(map(str, WIDTHS))}, SGD(lr={LR}, "
              f"momentum={MOMENTUM}, weight_decay={WEIGHT_DECAY}) with cosine annealing, "
              f"{epochs} epochs")
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
    ap.add_argument("--subset", type=int, default=None,
                    help="train on the first N training images only (a quick run)")
    a = ap.parse_args()
    main(a.epochs, use_torch=not a.no_torch, subset=a.subset)
