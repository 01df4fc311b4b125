"""The benchmark workloads (see the project's benchmark table), built in graphc and PyTorch
from the same initial weights and the same input arrays."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import graphc as gc
from graphc import nn, optim


@dataclass
class Workload:
    name: str
    graphc_step: Callable[[], Any]
    torch_step: Callable[[], Any] | None
    flops: float  # per step (0 when not a GEMM-bound workload)
    compile_seconds: float = 0.0


# ``--autocast bf16``: the train steps run forward and loss under autocast (graphc's and
# PyTorch's, bfloat16), as PyTorch's AMP recipe does; set before the workloads are built
AUTOCAST: dict[str, Any] = {"dtype": None}


def graphc_train_step(model: Any, opt: Any, loss_fn: Any, x: Any, y: Any) -> Callable[[], Any]:
    """The standard step (zero_grad, forward, loss, backward, step), compiled for (x, y)."""
    mixed = AUTOCAST["dtype"] is not None

    @gc.compile(example_args=(x, y))
    def step(a: Any, b: Any) -> Any:
        opt.zero_grad()
        with gc.autocast("cpu", dtype=gc.bfloat16, enabled=mixed):
            loss = loss_fn(model(a), b)
        loss.backward()
        opt.step()
        return loss

    return lambda: step(x, y)


def torch_train_step(model: Any, opt: Any, loss_fn: Any, x: Any, y: Any) -> Callable[[], Any]:
    """The same step in eager PyTorch (x, y: tensors)."""
    import torch

    mixed = AUTOCAST["dtype"] is not None

    def step() -> Any:
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mixed):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


def _mlp_flops(batch: int, dims: list[int], train: bool) -> float:
    layers = list(zip(dims[:-1], dims[1:]))
    if not train:
        return 2.0 * batch * sum(i * o for i, o in layers)
    first = 4.0 * batch * layers[0][0] * layers[0][1]
    return first + 6.0 * batch * sum(i * o for i, o in layers[1:])


def _graphc_mlp(dims: list[int]) -> nn.Module:
    mods: list[Any] = []
    for k, (i, o) in enumerate(zip(dims[:-1], dims[1:])):
        mods.append(nn.Linear(i, o))
        if k < len(dims) - 2:
            mods.append(nn.ReLU())
    return nn.Sequential(*mods)


def _torch_mlp(torch: Any, gm: nn.Module, dims: list[int]) -> Any:
    mods: list[Any] = []
    for k, (i, o) in enumerate(zip(dims[:-1], dims[1:])):
        mods.append(torch.nn.Linear(i, o))
        if k < len(dims) - 2:
            mods.append(torch.nn.ReLU())
    tm = torch.nn.Sequential(*mods)
    with torch.no_grad():
        for (k, v) in tm.state_dict().items():
            v.copy_(torch.from_numpy(gm.state_dict()[k]))
    return tm


def seed(torch: Any) -> Workload:
    X = np.arange(0, 1, 0.02, dtype=np.float32)[:40, None]
    Y = (0.7 * X + 0.3).astype(np.float32)
    m, lf = nn.Linear(1, 1), nn.L1Loss()
    opt = optim.SGD(m.parameters(), lr=0.01)

    @gc.compile(example_args=(X, Y))
    def step(x: Any, y: Any) -> Any:
        loss = lf(m(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    tstep = None
    if torch is not None:
        tm = torch.nn.Linear(1, 1)
        to = torch.optim.SGD(tm.parameters(), lr=0.01)
        tl = torch.nn.L1Loss()
        tx, ty = torch.from_numpy(X), torch.from_numpy(Y)

        def tstep() -> Any:
            loss = tl(tm(tx), ty)
            to.zero_grad()
            loss.backward()
            to.step()
            return loss

    return Workload("seed", lambda: step(X, Y), tstep, 0.0)


def mlp(torch: Any, name: str, dims: list[int], batch: int, make_opt: Callable, train: bool = True
        ) -> Workload:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((batch, dims[0])).astype(np.float32)
    Y = rng.integers(0, dims[-1], batch).astype(np.int64)
    gm = _graphc_mlp(dims)
    flops = _mlp_flops(batch, dims, train)
    has_ce = hasattr(nn, "CrossEntropyLoss")
    Yf = np.eye(dims[-1], dtype=np.float32)[Y]
    if train:
        gopt = make_opt(optim, gm.parameters())
        lf = nn.CrossEntropyLoss() if has_ce else nn.MSELoss()
        gfn = graphc_train_step(gm, gopt, lf, X, Y if has_ce else Yf)
    else:
        @gc.compile(example_args=(X,))
        def infer(x: Any) -> Any:
            with gc.inference_mode():
                return gm(x)

        gfn = lambda: infer(X)  # noqa: E731
    tfn = None
    if torch is not None:
        tm = _torch_mlp(torch, gm, dims)
        tx = torch.from_numpy(X)
        ty = torch.from_numpy(Y if has_ce else Yf)
        if train:
            topt = make_opt(torch.optim, tm.parameters())
            tlf = torch.nn.CrossEntropyLoss() if has_ce else torch.nn.MSELoss()
            tfn = torch_train_step(tm, topt, tlf, tx, ty)
        else:
            def tfn() -> Any:
                with torch.inference_mode():
                    return tm(tx)
    return Workload(name, gfn, tfn, flops)


def _cnn_flops(batch: int) -> float:
    """Multiply-adds of the two convolutions and the linear layer, times 2 (forward), 4 for
    the backward (weight and input gradients; the first layer's input needs none)."""
    c1 = 28 * 28 * 8 * 1 * 9  # per image
    c2 = 14 * 14 * 16 * 8 * 9
    lin = 784 * 10
    return batch * (2 * (c1 + c2 + lin) + 2 * c1 + 4 * (c2 + lin))


def resnet18_imagenet(torch: Any) -> Workload:
    """torchvision's ResNet-18 (``benchmarks.resnet.IMAGENET``: widths 64-512, the 7x7
    stride-2 stem and its 3x3 max-pool, 1000 classes) on 3x224x224 images, batch 8, trained
    as the ``resnet18`` workload is."""
    from . import resnet

    return resnet18(torch, batch=8, size=224, name="resnet18_imagenet", num_classes=1000,
                    **resnet.IMAGENET)


def resnet50(torch: Any) -> Workload:
    """torchvision's ResNet-50 (``benchmarks.resnet.RESNET50``: bottleneck blocks 3-4-6-3,
    widths 64-512 expanded 4x, the ImageNet stem, 1000 classes) on 3x224x224 images, batch
    8, trained as the ``resnet18`` workload is."""
    from . import resnet

    return resnet18(torch, batch=8, size=224, name="resnet50", num_classes=1000,
                    **resnet.RESNET50)


def cnn(torch: Any, batch: int = 64) -> Workload:
    """Conv(1->8,3,p1)-ReLU-MaxPool2-Conv(8->16,3,p1)-ReLU-MaxPool2-Flatten-Linear(784,10)."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((batch, 1, 28, 28)).astype(np.float32)
    Y = rng.integers(0, 10, batch).astype(np.int64)
    gm = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                       nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                       nn.Flatten(), nn.Linear(784, 10))
    gopt = optim.SGD(gm.parameters(), lr=1e-2, momentum=0.9)
    gfn = graphc_train_step(gm, gopt, nn.CrossEntropyLoss(), X, Y)

    tfn = None
    if torch is not None:
        tn = torch.nn
        tm = tn.Sequential(tn.Conv2d(1, 8, 3, padding=1), tn.ReLU(), tn.MaxPool2d(2),
                           tn.Conv2d(8, 16, 3, padding=1), tn.ReLU(), tn.MaxPool2d(2),
                           tn.Flatten(), tn.Linear(784, 10))
        tm.load_state_dict({k: torch.from_numpy(np.array(v))
                            for k, v in gm.state_dict().items()})
        topt = torch.optim.SGD(tm.parameters(), lr=1e-2, momentum=0.9)
        tfn = torch_train_step(tm, topt, tn.CrossEntropyLoss(), torch.from_numpy(X),
                               torch.from_numpy(Y))

    return Workload("cnn", gfn, tfn, _cnn_flops(batch))


def resnet18(torch: Any, batch: int = 32, size: int = 64, t_max: int = 1000,
             name: str = "resnet18", **net: Any) -> Workload:
    """ResNet-18 (``benchmarks.resnet``: widths 16-32-64-128, one input channel, or the
    architecture ``net`` names) on ``size`` x ``size`` images; SGD(lr=0.1, momentum=0.9,
    weight_decay=5e-4) with a CosineAnnealingLR over ``t_max`` steps, stepped after every
    step as a user's loop does: the scheduler writes ``param_groups[0]["lr"]``, a run-time
    input of the compiled step (no recompilation), so it runs outside the compiled function
    in both systems."""
    from . import resnet

    rng = np.random.default_rng(0)
    chans = net.get("in_channels", resnet.IN_CHANNELS)
    classes = net.get("num_classes", resnet.NUM_CLASSES)
    X = rng.standard_normal((batch, chans, size, size)).astype(np.float32)
    Y = rng.integers(0, classes, batch).astype(np.int64)
    gm = resnet.build(nn, **net)
    gopt = optim.SGD(gm.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    gsched = optim.lr_scheduler.CosineAnnealingLR(gopt, T_max=t_max)
    gstep = graphc_train_step(gm, gopt, nn.CrossEntropyLoss(), X, Y)

    def gfn() -> Any:
        loss = gstep()
        gsched.step()
        return loss

    tfn = None
    if torch is not None:
        tm = resnet.torch_copy(torch, gm, **net)
        # the learning rate as a tensor, which the scheduler updates in place: a float that
        # changes every step would make torch.compile recompile the optimizer's step each
        # time until its recompile limit, then run it eagerly (PyTorch's advice for compiled
        # optimizers with schedulers); eager PyTorch runs the same either way
        topt = torch.optim.SGD(tm.parameters(), lr=torch.tensor(0.1), momentum=0.9,
                               weight_decay=5e-4)
        tsched = torch.optim.lr_scheduler.CosineAnnealingLR(topt, T_max=t_max)
        tstep = torch_train_step(tm, topt, torch.nn.CrossEntropyLoss(), torch.from_numpy(X),
                                 torch.from_numpy(Y))

        def tfn() -> Any:
            loss = tstep()
            tsched.step()
            return loss

    return Workload(name, gfn, tfn, resnet.flops(batch, size, **net))


def net_workload(torch: Any, name: str, build: Any, batch: int, size: int,
                 num_classes: int = 1000, **net: Any) -> Workload:
    """A network of ``benchmarks.nets`` (``build``) on ``size`` x ``size`` RGB images,
    trained with AdamW (lr 1e-3, weight decay 0.05, as both papers' recipes) and
    cross-entropy."""
    from . import nets

    rng = np.random.default_rng(0)
    X = rng.standard_normal((batch, 3, size, size)).astype(np.float32)
    Y = rng.integers(0, num_classes, batch).astype(np.int64)
    gc.manual_seed(0)
    gm = build(nn, gc, num_classes=num_classes, **net)
    gopt = optim.AdamW(gm.parameters(), lr=1e-3, weight_decay=0.05)
    gfn = graphc_train_step(gm, gopt, nn.CrossEntropyLoss(), X, Y)
    tfn = None
    if torch is not None:
        tm = nets.torch_copy(torch, gm, build, num_classes=num_classes, **net)
        topt = torch.optim.AdamW(tm.parameters(), lr=1e-3, weight_decay=0.05)
        tfn = torch_train_step(tm, topt, torch.nn.CrossEntropyLoss(), torch.from_numpy(X),
                               torch.from_numpy(Y))
    return Workload(name, gfn, tfn, 0.0)


def char_lstm(lib: Any, vocab: int = 96, hidden: int = 256, layers: int = 2) -> Any:
    """The character LSTM language model (``lib``: graphc's or PyTorch's ``nn``): embedding
    64, ``LSTM(64, hidden, num_layers=layers, batch_first=True)``, a linear read-out; its
    forward returns the logits of every position, flattened to ``(batch * length, vocab)``."""

    class CharLSTM(lib.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = lib.Embedding(vocab, 64)
            self.lstm = lib.LSTM(64, hidden, num_layers=layers, batch_first=True)
            self.head = lib.Linear(hidden, vocab)

        def forward(self, idx: Any) -> Any:
            out, _ = self.lstm(self.embed(idx))
            return self.head(out).reshape(-1, vocab)

    return CharLSTM()


def char_lstm_step(nn_lib: Any, optim_lib: Any, model: Any, amp: Any = None
                   ) -> Callable[[Any, Any], Any]:
    """The language model's training step in either framework: zero_grad, cross-entropy of
    every position, backward, ``clip_grad_norm_(1.0)``, Adam (lr 2e-3); ``amp``: a function
    returning the autocast context of the forward and loss (``--autocast``), or None."""
    opt = optim_lib.Adam(model.parameters(), lr=2e-3)
    lf = nn_lib.CrossEntropyLoss()

    def step(x: Any, y: Any) -> Any:
        opt.zero_grad()
        with amp() if amp is not None else contextlib.nullcontext():
            loss = lf(model(x), y.reshape(-1))
        loss.backward()
        nn_lib.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    return step


def lstm(torch: Any, batch: int = 32, seq: int = 64, hidden: int = 256, vocab: int = 96,
         layers: int = 2) -> Workload:
    """The character-level LSTM language model of ``examples/char_rnn.py`` at the size of the
    loop-node issue (``char_lstm``, ``char_lstm_step``); batch 32 of length 64."""
    rng = np.random.default_rng(0)
    X = rng.integers(0, vocab, (batch, seq)).astype(np.int64)
    Y = rng.integers(0, vocab, (batch, seq)).astype(np.int64)
    mixed = AUTOCAST["dtype"] is not None
    gm = char_lstm(nn, vocab, hidden, layers)
    gamp = (lambda: gc.autocast("cpu", dtype=gc.bfloat16)) if mixed else None
    gstep = gc.compile(char_lstm_step(nn, optim, gm, gamp), example_args=(X, Y))
    tfn = None
    if torch is not None:
        tm = char_lstm(torch.nn, vocab, hidden, layers)
        with torch.no_grad():
            for k, v in tm.state_dict().items():
                v.copy_(torch.from_numpy(np.asarray(gm.state_dict()[k])))
        tamp = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if mixed else None
        tstep = char_lstm_step(torch.nn, torch.optim, tm, tamp)
        tx, ty = torch.from_numpy(X), torch.from_numpy(Y)
        tfn = lambda: tstep(tx, ty)  # noqa: E731

    # forward: input projections (4H x in) and recurrent products (4H x H) per position and
    # layer, the read-out; backward twice that
    per_pos = sum(4 * hidden * ((64 if i == 0 else hidden) + hidden) for i in range(layers))
    flops = 6.0 * batch * seq * (per_pos + hidden * vocab)
    return Workload("lstm", lambda: gstep(X, Y), tfn, flops)


def gpt(torch: Any, layers: int = 2, block: int = 32, batch: int = 16, name: str = "gpt"
        ) -> Workload:
    """The training step of ``examples/gpt.py`` (the same model, AdamW with decay/no-decay
    groups, ``clip_grad_norm_``, cosine schedule with warm-up) at the compile-time
    benchmark's size: block 32, n_embd 64, 2 heads, batch 16, vocabulary 85, dropout 0 (so
    both systems compute the same thing); the two models start from the same weights.
    ``gpt_long`` is the same model on 256 positions (batch 8), where attention (the fused
    kernels in graphc, PyTorch's flash kernel) is a third of the work."""
    import sys
    from pathlib import Path

    from graphc.nn import functional as F

    root = Path(__file__).resolve().parent.parent / "examples"
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    import gpt as example

    cfg = dict(block_size=block, n_embd=64, n_head=2, n_layer=layers, dropout=0.0)
    vocab = 85
    rng = np.random.default_rng(0)
    X = rng.integers(0, vocab, (batch, cfg["block_size"])).astype(np.int64)
    Y = rng.integers(0, vocab, (batch, cfg["block_size"])).astype(np.int64)
    gm = example.define(nn, F)(vocab, **cfg)
    state = example.initial_state(gm, layers)
    gm.load_state_dict(state, strict=False)
    mixed = AUTOCAST["dtype"] is not None
    gamp = (lambda: gc.autocast("cpu", dtype=gc.bfloat16)) if mixed else None
    gstep_fn, _, gsched = example.make_trainer(gm, nn, F, optim, 10_000, amp=gamp)
    gstep = gc.compile(gstep_fn, example_args=(X, Y))

    def gfn() -> Any:
        loss = gstep(X, Y)
        gsched.step()
        return loss

    tfn = None
    if torch is not None:
        tm = example.define(torch.nn, torch.nn.functional)(vocab, **cfg)
        tm.load_state_dict({k: torch.tensor(v) for k, v in state.items()}, strict=False)
        tamp = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if mixed else None
        tstep, _, tsched = example.make_trainer(tm, torch.nn, torch.nn.functional,
                                                torch.optim, 10_000, amp=tamp)
        tx, ty = torch.from_numpy(X), torch.from_numpy(Y)

        def tfn() -> Any:
            loss = tstep(tx, ty)
            tsched.step()
            return loss

    # the matrix products: per token and layer 4 C^2 (qkv, proj) + 8 C^2 (MLP) + 2 T C
    # (scores, values), and the tied read-out C V; times 6 for forward and backward
    c, t = cfg["n_embd"], cfg["block_size"]
    flops = 6.0 * batch * t * (layers * (12 * c * c + 2 * t * c) + c * vocab)
    return Workload(name, gfn, tfn, flops)


def _nets() -> Any:
    from . import nets

    return nets


def all_workloads(torch: Any, only: Any = None) -> list[Workload]:
    """Every workload, in the order of ``benchmarks.__main__.WORKLOADS``; with ``only`` (a
    collection of names) just those, so naming one workload does not compile the others
    (the ResNet alone takes seconds)."""
    keep = (lambda name: True) if not only else (lambda name: name in only)  # noqa: E731
    sgd_small = lambda o, p: o.SGD(p, lr=1e-3, momentum=0.9, weight_decay=1e-4)  # noqa: E731
    makers: list[tuple[str, Callable[[], Workload]]] = [
        ("seed", lambda: seed(torch)),
        ("mlp_small", lambda: mlp(torch, "mlp_small", [784, 256, 10], 64, sgd_small)),
        ("mlp_large", lambda: mlp(torch, "mlp_large", [784, 1024, 1024, 10], 256,
                                  lambda o, p: o.SGD(p, lr=1e-3, momentum=0.9))),
        ("infer", lambda: mlp(torch, "infer", [784, 256, 10], 64, sgd_small, train=False)),
        ("cnn", lambda: cnn(torch)),
    ]
    if hasattr(optim, "Adam"):
        makers.append(("adam", lambda: mlp(torch, "adam", [784, 256, 10], 64,
                                           lambda o, p: o.Adam(p, lr=1e-3))))
    makers.append(("resnet18", lambda: resnet18(torch)))
    makers.append(("resnet18_imagenet", lambda: resnet18_imagenet(torch)))
    makers.append(("resnet50", lambda: resnet50(torch)))
    makers.append(("convnext", lambda: net_workload(torch, "convnext", _nets().convnext, 8,
                                                    224)))
    makers.append(("vit", lambda: net_workload(torch, "vit", _nets().vit, 16, 224)))
    makers.append(("lstm", lambda: lstm(torch)))
    makers.append(("gpt", lambda: gpt(torch)))
    makers.append(("gpt_long", lambda: gpt(torch, block=256, batch=8, name="gpt_long")))
    return [make() for name, make in makers if keep(name)]
