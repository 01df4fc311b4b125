"""nn.RNN / LSTM / GRU, their cells and nn.utils.rnn against PyTorch.

Outputs, final states and every gradient (parameters, input, h0/c0) match eagerly; compiled
training steps (backward + SGD) leave the same parameters and gradients as PyTorch after a few
steps. Compiled steps unroll the time loop today, so each sequence length is its own compile;
``test_one_compile_serves_two_sequence_lengths`` is the strict xfail that flips when the IR
loop node lands.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _torch import torch

import graphc as gc
from graphc import nn, optim
from graphc.nn.utils import rnn as grnn

trnn = torch.nn.utils.rnn
IN, H = 3, 4  # input and hidden sizes: small, the loop length is what costs

# name -> (torch / graphc class name, constructor kwargs)
KINDS = {
    "rnn_tanh": ("RNN", {}),
    "rnn_relu": ("RNN", {"nonlinearity": "relu"}),
    "lstm": ("LSTM", {}),
    "gru": ("GRU", {}),
    "lstm_proj": ("LSTM", {"proj_size": 2}),
}


def _close(a: Any, b: Any, what: str, tol: float = 2e-5) -> None:
    b = b.detach().numpy() if isinstance(b, torch.Tensor) else np.asarray(b)
    np.testing.assert_allclose(np.asarray(a), b, rtol=tol, atol=tol, err_msg=what)


def _twins(kind: str, **kw: Any) -> tuple[Any, Any]:
    """A PyTorch module and the graphc module holding its weights."""
    cls, extra = KINDS[kind]
    tm = getattr(torch.nn, cls)(IN, H, **extra, **kw)
    gm = getattr(nn, cls)(IN, H, **extra, **kw)
    gm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    return tm, gm


def _state_shapes(kind: str, layers: int, bidir: bool, batch: int | None) -> list[tuple]:
    d = layers * (2 if bidir else 1)
    hout = 2 if kind == "lstm_proj" else H
    lead = (d,) if batch is None else (d, batch)
    shapes = [(*lead, hout)]
    if kind.startswith("lstm"):
        shapes.append((*lead, H))
    return shapes


def _flat(out: Any) -> list[Any]:
    """``(output, h)`` or ``(output, (h, c))`` as a flat list."""
    o, h = out
    return [o, *h] if isinstance(h, tuple) else [o, h]


def _weights(shapes: list[tuple], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def _run_both(kind: str, tm: Any, gm: Any, x: np.ndarray, states: list[np.ndarray] | None,
              seed: int = 0) -> None:
    """Forward both, a random weighting of every output as the loss, backward; compare."""
    tx = torch.tensor(x, requires_grad=True)
    gx = gc.tensor(x, requires_grad=True)
    ts = gs = None
    if states is not None:
        ts = [torch.tensor(s, requires_grad=True) for s in states]
        gs = [gc.tensor(s, requires_grad=True) for s in states]
    pack = (lambda s: tuple(s)) if kind.startswith("lstm") else (lambda s: s[0])
    tout = _flat(tm(tx, None if ts is None else pack(ts)))
    gout = _flat(gm(gx, None if gs is None else pack(gs)))
    assert [tuple(o.shape) for o in gout] == [tuple(o.shape) for o in tout]
    for i, (g, t) in enumerate(zip(gout, tout)):
        _close(g.numpy(), t, f"output {i}")
    ws = _weights([tuple(o.shape) for o in tout], seed)
    sum(((o * torch.tensor(w)).sum() for o, w in zip(tout, ws)), torch.zeros(())).backward()
    sum(((o * gc.tensor(w)).sum() for o, w in zip(gout, ws)), gc.zeros(())).backward()
    _close(gx.grad.numpy(), tx.grad, "input grad")
    for i, (g, t) in enumerate(zip(gs or [], ts or [])):
        _close(g.grad.numpy(), t.grad, f"state {i} grad")
    tp = dict(tm.named_parameters())
    for name, p in gm.named_parameters():
        _close(p.grad.numpy(), tp[name].grad, f"grad of {name}")


@pytest.mark.parametrize("seq", [1, 7])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("layers,bidir", [(1, False), (1, True), (2, False), (2, True)])
@pytest.mark.parametrize("kind", list(KINDS))
def test_eager_matches_torch(kind: str, layers: int, bidir: bool, batch_first: bool,
                             seq: int) -> None:
    torch.manual_seed(0)
    tm, gm = _twins(kind, num_layers=layers, bidirectional=bidir, batch_first=batch_first)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, seq, IN) if batch_first else (seq, 2, IN)).astype(np.float32)
    given = (seq + layers) % 2 == 0  # half the cases give the initial states
    states = _weights(_state_shapes(kind, layers, bidir, 2), 2) if given else None
    _run_both(kind, tm, gm, x, states)


@pytest.mark.parametrize("given", [False, True])
@pytest.mark.parametrize("kind", ["rnn_tanh", "lstm", "gru", "lstm_proj"])
def test_unbatched_input(kind: str, given: bool) -> None:
    torch.manual_seed(1)
    tm, gm = _twins(kind, num_layers=2, bidirectional=True, batch_first=True)
    x = np.random.default_rng(3).standard_normal((5, IN)).astype(np.float32)
    states = _weights(_state_shapes(kind, 2, True, None), 4) if given else None
    _run_both(kind, tm, gm, x, states)


@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("cell", ["RNNCell", "RNNCell_relu", "LSTMCell", "GRUCell"])
def test_cells_match_torch(cell: str, batched: bool) -> None:
    torch.manual_seed(2)
    name, kw = (cell.split("_")[0], {"nonlinearity": "relu"}) if "_" in cell else (cell, {})
    tm, gm = getattr(torch.nn, name)(IN, H, **kw), getattr(nn, name)(IN, H, **kw)
    gm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    rng = np.random.default_rng(5)
    lead = (3,) if batched else ()
    x = rng.standard_normal((*lead, IN)).astype(np.float32)
    n_states = 2 if name == "LSTMCell" else 1
    states = [rng.standard_normal((*lead, H)).astype(np.float32) for _ in range(n_states)]
    for given in (False, True):
        tx, gx = torch.tensor(x, requires_grad=True), gc.tensor(x, requires_grad=True)
        ts = [torch.tensor(s, requires_grad=True) for s in states]
        gs = [gc.tensor(s, requires_grad=True) for s in states]
        if not given:
            th, gh = tm(tx), gm(gx)
        elif name == "LSTMCell":
            th, gh = tm(tx, tuple(ts)), gm(gx, tuple(gs))
        else:
            th, gh = tm(tx, ts[0]), gm(gx, gs[0])
        touts = list(th) if isinstance(th, tuple) else [th]
        gouts = list(gh) if isinstance(gh, tuple) else [gh]
        ws = _weights([tuple(o.shape) for o in touts], 6)
        for i, (g, t) in enumerate(zip(gouts, touts)):
            _close(g.numpy(), t, f"{cell} output {i}")
        sum((o * torch.tensor(w)).sum() for o, w in zip(touts, ws)).backward()
        sum((o * gc.tensor(w)).sum() for o, w in zip(gouts, ws)).backward()
        _close(gx.grad.numpy(), tx.grad, "input grad")
        if given:
            for g, t in zip(gs, ts):
                _close(g.grad.numpy(), t.grad, "state grad")
        tp = dict(tm.named_parameters())
        for pname, p in gm.named_parameters():
            _close(p.grad.numpy(), tp[pname].grad, f"grad of {pname}")
            p.grad, tp[pname].grad = None, None


# -- compiled training steps ------------------------------------------------------------------

class _Twin:
    """The recurrent layer plus learnable initial states and a learnable input offset, so
    that a compiled step's gradients reach x and h0/c0 too (they are parameters here)."""

    def __init__(self, lib: Any, rnn: Any, kind: str, x_shape: tuple, layers: int,
                 bidir: bool) -> None:
        mod = torch.nn if lib is torch else nn
        self.module = mod.Module()
        self.module.rnn = rnn
        st = _weights(_state_shapes(kind, layers, bidir, x_shape[1 if not rnn.batch_first
                                                                  else 0]), 7)
        self.n_states = len(st)
        for i, s in enumerate(st):
            setattr(self.module, f"s{i}", mod.Parameter(lib.tensor(s)))
        self.module.dx = mod.Parameter(lib.tensor(_weights([x_shape], 8)[0] * 0.1))
        self.kind = kind

    def loss(self, x: Any, w: list[Any]) -> Any:
        m = self.module
        st = [getattr(m, f"s{i}") for i in range(self.n_states)]
        hx = tuple(st) if self.kind.startswith("lstm") else st[0]
        outs = _flat(m.rnn(x + m.dx, hx))
        total = (outs[0] * w[0]).sum()
        for o, wi in zip(outs[1:], w[1:]):
            total = total + (o * wi).sum()
        return total


def _compiled_parity(kind: str, layers: int, bidir: bool, batch_first: bool, seq: int,
                     steps: int = 3) -> gc.CompiledFunction:
    torch.manual_seed(3)
    tm, gm = _twins(kind, num_layers=layers, bidirectional=bidir, batch_first=batch_first)
    shape = (2, seq, IN) if batch_first else (seq, 2, IN)
    t, g = _Twin(torch, tm, kind, shape, layers, bidir), _Twin(gc, gm, kind, shape, layers, bidir)
    with torch.no_grad():
        tout = _flat(tm(torch.zeros(shape)))
    ws = _weights([tuple(o.shape) for o in tout], 9)
    topt = torch.optim.SGD(t.module.parameters(), lr=0.05, momentum=0.9)
    gopt = optim.SGD(g.module.parameters(), lr=0.05, momentum=0.9)
    gws = [gc.tensor(w) for w in ws]

    def step(x: Any) -> Any:
        gopt.zero_grad()
        loss = g.loss(x, gws)
        loss.backward()
        gopt.step()
        return loss

    cstep = gc.compile(step, dynamic=False)
    rng = np.random.default_rng(10)
    for i in range(steps):
        x = rng.standard_normal(shape).astype(np.float32)
        topt.zero_grad()
        tl = t.loss(torch.tensor(x), [torch.tensor(w) for w in ws])
        tl.backward()
        topt.step()
        gl = cstep(x)
        _close(gl.numpy(), tl, f"loss at step {i}", tol=1e-4)
    tp = dict(t.module.named_parameters())
    for name, p in g.module.named_parameters():
        _close(p.grad.numpy(), tp[name].grad, f"grad of {name}", tol=1e-4)
        _close(p.numpy(), tp[name], f"{name} after {steps} steps", tol=1e-4)
    assert cstep.compile_count == 1
    return cstep


@pytest.mark.parametrize("kind,layers,bidir,batch_first,seq", [
    ("rnn_tanh", 1, False, True, 7),
    ("rnn_relu", 2, True, False, 7),
    ("lstm", 2, True, True, 7),
    ("gru", 1, True, False, 7),
    ("lstm_proj", 1, False, False, 7),
    ("gru", 2, False, True, 1),
    ("lstm", 1, False, True, 16),
])
def test_compiled_training_matches_torch(kind: str, layers: int, bidir: bool,
                                         batch_first: bool, seq: int) -> None:
    _compiled_parity(kind, layers, bidir, batch_first, seq)


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("layers,bidir,batch_first", [(2, True, False), (2, True, True)])
def test_compiled_training_matches_torch_wide(kind: str, layers: int, bidir: bool,
                                              batch_first: bool) -> None:
    _compiled_parity(kind, layers, bidir, batch_first, 16, steps=4)


@pytest.mark.parametrize("cell", ["RNNCell", "LSTMCell", "GRUCell"])
def test_compiled_cell_step(cell: str) -> None:
    """A cell applied by the user over 3 steps, compiled with a symbolic batch dimension."""
    torch.manual_seed(4)
    tm, gm = getattr(torch.nn, cell)(IN, H), getattr(nn, cell)(IN, H)
    gm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    topt, gopt = torch.optim.SGD(tm.parameters(), lr=0.1), optim.SGD(gm.parameters(), lr=0.1)

    def unroll(m: Any, xs: Any) -> Any:
        hx = None
        for t in range(3):
            hx = m(xs[:, t], hx)
        h = hx[0] if isinstance(hx, tuple) else hx
        return (h * h).sum()

    @gc.compile
    def step(xs: Any) -> Any:
        gopt.zero_grad()
        loss = unroll(gm, xs)
        loss.backward()
        gopt.step()
        return loss

    rng = np.random.default_rng(11)
    for b in (2, 5):
        xs = rng.standard_normal((b, 3, IN)).astype(np.float32)
        topt.zero_grad()
        tl = unroll(tm, torch.tensor(xs))
        tl.backward()
        topt.step()
        _close(step(xs).numpy(), tl, "loss", tol=1e-4)
    for name, p in tm.named_parameters():
        _close(getattr(gm, name).numpy(), p, name, tol=1e-4)
    assert step.compile_count == 1


def test_compiled_batch_first_symbolic_batch() -> None:
    """The default gc.compile (first dim symbolic) with batch_first=True: one compile serves
    two batch sizes."""
    torch.manual_seed(5)
    tm, gm = _twins("gru", batch_first=True)

    @gc.compile
    def fwd(x: Any) -> Any:
        out, h = gm(x)
        return out.sum() + h.sum()

    for b in (2, 3):
        x = np.random.default_rng(b).standard_normal((b, 4, IN)).astype(np.float32)
        out, h = tm(torch.tensor(x))
        _close(fwd(x).numpy(), out.sum() + h.sum(), f"batch {b}", tol=1e-4)
    assert fwd.compile_count == 1


def test_time_first_symbolic_length_then_dynamic_batch_axis() -> None:
    """batch_first=False puts time first, which the default gc.compile makes symbolic: the
    scan's trip count is that symbol, so two lengths share one compile; marking the batch
    axis dynamic instead compiles too."""
    torch.manual_seed(6)
    tm, gm = _twins("rnn_tanh")
    x = np.random.default_rng(0).standard_normal((5, 2, IN)).astype(np.float32)
    g = gc.compile(lambda x: gm(x)[0].sum())
    for t in (5, 2):
        _close(g(x[:t]).numpy(), tm(torch.tensor(x[:t]))[0].sum(), f"length {t}", tol=1e-4)
    assert g.compile_count == 1
    f = gc.compile(lambda x: gm(x)[0].sum(), dynamic={0: (1,)})
    _close(f(x).numpy(), tm(torch.tensor(x))[0].sum(), "time-first", tol=1e-4)
    _close(f(x[:, :1]).numpy(), tm(torch.tensor(x[:, :1]))[0].sum(), "batch 1", tol=1e-4)
    assert f.compile_count == 1


def test_initial_state_argument_in_compiled_step() -> None:
    """h0 passed as an argument: its batch axis is the second, so the default dynamic first
    dims disagree and the error says how to mark the axes; marking them compiles once."""
    gm = nn.GRU(IN, H, batch_first=True)
    f = gc.compile(lambda x, h: gm(x, h)[0].sum())
    x, h = np.ones((2, 5, IN), np.float32), np.zeros((1, 2, H), np.float32)
    with pytest.raises(RuntimeError, match="Expected hidden size .* mark the batch axes"):
        f(x, h)
    f = gc.compile(lambda x, h: gm(x, h)[0].sum(), dynamic={0: (0,), 1: (1,)})
    for b in (2, 3):
        x, h = np.ones((b, 5, IN), np.float32), np.full((1, b, H), 0.5, np.float32)
        _close(f(x, h).numpy(), gm(x, h)[0].sum().numpy(), f"batch {b}", tol=1e-5)
    assert f.compile_count == 1


def test_one_compile_serves_two_sequence_lengths() -> None:
    gm = nn.LSTM(IN, H, batch_first=True)
    f = gc.compile(lambda x: gm(x)[0].sum(), dynamic={0: (0, 1)})
    for seq in (3, 5):
        f(np.ones((2, seq, IN), np.float32))
    assert f.compile_count == 1


# -- dropout, init, state dicts ---------------------------------------------------------------

@pytest.mark.parametrize("kind", ["rnn_tanh", "lstm", "gru"])
def test_dropout(kind: str) -> None:
    torch.manual_seed(7)
    tm, gm = _twins(kind, num_layers=3, dropout=0.5, bidirectional=True)
    x = np.random.default_rng(2).standard_normal((4, 2, IN)).astype(np.float32)
    tm.eval(), gm.eval()
    ref = _flat(gm(x))[0].numpy()
    _close(ref, _flat(tm(torch.tensor(x)))[0], "eval mode ignores dropout")
    gm.train()
    gc.manual_seed(1)
    a = _flat(gm(x))[0].numpy()
    gc.manual_seed(1)
    b = _flat(gm(x))[0].numpy()
    np.testing.assert_array_equal(a, b)  # the same seed, the same masks
    assert np.abs(a - ref).max() > 1e-3  # and they do drop
    # the same seed gives the same masks compiled
    f = gc.compile(lambda x: _flat(gm(x))[0], dynamic=False)
    gc.manual_seed(1)
    np.testing.assert_allclose(f(x).numpy(), a, rtol=1e-5, atol=1e-6)
    # p = 1 is deterministic: every layer after the first sees zeros, as in PyTorch
    tm.dropout = gm.dropout = 1.0
    tm.train()
    _close(_flat(gm(x))[0].numpy(), _flat(tm(torch.tensor(x)))[0], "dropout=1")


def test_dropout_mask_statistics() -> None:
    """Between layers about p of the activations are zeroed and the rest scaled by 1/(1-p):
    the second layer of a linear RNN (relu on positive values) sees E[x] unchanged."""
    gc.manual_seed(3)
    m = nn.RNN(1, 400, num_layers=2, nonlinearity="relu", dropout=0.25, bias=False)
    for name, p in m.named_parameters():
        arr = np.zeros(p.shape, np.float32)
        if name == "weight_ih_l0":
            arr[:] = 1.0
        if name == "weight_ih_l1":
            arr[0, :] = 1.0 / 400
        p.data = gc.tensor(arr)
    x = np.ones((1, 50, 1), np.float32)
    eval_out = m.eval()(x)[0].numpy()[0, :, 0]
    train_out = m.train()(x)[0].numpy()[0, :, 0]
    np.testing.assert_allclose(eval_out, 1.0, rtol=1e-6)
    assert abs(train_out.mean() - 1.0) < 0.03  # 20,000 Bernoulli(0.75) draws / 0.75
    assert train_out.std() > 0.01


def test_dropout_validation() -> None:
    for bad in (-0.1, 1.5, True, "0.1"):
        with pytest.raises(ValueError, match=r"dropout should be a number in range \[0, 1\]"):
            nn.LSTM(IN, H, dropout=bad)
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1"):
        nn.GRU(IN, H, dropout=0.2)


@pytest.mark.parametrize("kind", list(KINDS))
def test_init_names_shapes_and_state_dict_both_ways(kind: str) -> None:
    cls, extra = KINDS[kind]
    kw = dict(num_layers=2, bidirectional=True, **extra)
    torch.manual_seed(11)
    tm = getattr(torch.nn, cls)(IN, H, **kw)
    gc.manual_seed(11)
    gm = getattr(nn, cls)(IN, H, **kw)
    tsd, gsd = tm.state_dict(), gm.state_dict()
    assert list(gsd) == list(tsd)
    for k in tsd:  # the same draws, in the same order, from the same generator
        _close(gsd[k], tsd[k], f"init of {k}", tol=1e-6)
    assert [[n for n in names] for names in gm._all_weights] == tm._all_weights
    assert [[tuple(p.shape) for p in ws] for ws in gm.all_weights] == \
        [[tuple(p.shape) for p in ws] for ws in tm.all_weights]
    bound = 1 / np.sqrt(H)
    assert all(np.abs(v).max() <= bound for v in gsd.values())
    # graphc -> torch and back
    gc.manual_seed(12)
    other = getattr(nn, cls)(IN, H, **kw)
    tm.load_state_dict({k: torch.tensor(v) for k, v in other.state_dict().items()})
    gm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    for k, v in other.state_dict().items():
        np.testing.assert_array_equal(gm.state_dict()[k], v)
    assert repr(gm).replace("graphc", "") == repr(tm).replace("torch", "")


def test_dtype_and_no_bias() -> None:
    m = nn.GRU(IN, H, bias=False, dtype=gc.float64, device="cpu")
    assert [n for n, _ in m.named_parameters()] == ["weight_ih_l0", "weight_hh_l0"]
    assert all(p.dtype == gc.float64 for p in m.parameters())
    out, h = m(np.zeros((2, 1, IN)))
    assert out.dtype == gc.float64 and h.shape == (1, 1, H)
    torch.manual_seed(0)
    tm, gm = _twins("lstm", bias=False)
    x = np.random.default_rng(0).standard_normal((3, 2, IN)).astype(np.float32)
    _run_both("lstm", tm, gm, x, None)


# -- errors: PyTorch's types and messages ----------------------------------------------------

def _same_error(fn: Any) -> None:
    """``fn(lib, module_factory)`` raises the same exception type and message in both."""
    with pytest.raises(Exception) as te:
        fn(torch)
    with pytest.raises(type(te.value)) as ge:
        fn(gc)
    assert str(ge.value).replace("graphc.", "torch.") == str(te.value)


def _mod(lib: Any, cls: str, *a: Any, **k: Any) -> Any:
    return getattr(torch.nn if lib is torch else nn, cls)(*a, **k)


def _z(lib: Any, *shape: int, dtype: Any = None) -> Any:
    return lib.zeros(*shape) if dtype is None else lib.zeros(*shape, dtype=dtype)


ERRORS = {
    "input_size": lambda L: _mod(L, "RNN", IN, H)(_z(L, 4, 3, 5)),
    "input_4d": lambda L: _mod(L, "RNN", IN, H)(_z(L, 4, 3, 2, 1)),
    "input_1d_gru": lambda L: _mod(L, "GRU", IN, H)(_z(L, 2)),
    "lstm_1d": lambda L: _mod(L, "LSTM", IN, H)(_z(L, 2)),
    "h0_batch": lambda L: _mod(L, "RNN", IN, H)(_z(L, 4, 3, IN), _z(L, 1, 4, H)),
    "h0_rank": lambda L: _mod(L, "GRU", IN, H)(_z(L, 4, 3, IN), _z(L, 3, H)),
    "h0_unbatched_rank": lambda L: _mod(L, "RNN", IN, H)(_z(L, 4, IN), _z(L, 1, 1, H)),
    "h0_layers": lambda L: _mod(L, "GRU", IN, H, 2)(_z(L, 4, 3, IN), _z(L, 1, 3, H)),
    "lstm_h0": lambda L: _mod(L, "LSTM", IN, H)(_z(L, 4, 3, IN), (_z(L, 1, 4, H), _z(L, 1, 3, H))),
    "lstm_c0": lambda L: _mod(L, "LSTM", IN, H)(_z(L, 4, 3, IN), (_z(L, 1, 3, H), _z(L, 1, 3, 5))),
    "lstm_proj_h0": lambda L: _mod(L, "LSTM", IN, H, proj_size=2)(
        _z(L, 4, 3, IN), (_z(L, 1, 3, H), _z(L, 1, 3, H))),
    "lstm_rank": lambda L: _mod(L, "LSTM", IN, H)(_z(L, 4, 3, IN), (_z(L, 3, H), _z(L, 1, 3, H))),
    "dtype": lambda L: _mod(L, "RNN", IN, H)(_z(L, 4, 3, IN, dtype=L.float64)),
    "seq_0": lambda L: _mod(L, "RNN", IN, H)(_z(L, 0, 3, IN)),
    "nonlinearity": lambda L: _mod(L, "RNN", IN, H, nonlinearity="gelu"),
    "proj_rnn": lambda L: _mod(L, "GRU", IN, H, proj_size=1),
    "proj_big": lambda L: _mod(L, "LSTM", IN, H, proj_size=H),
    "proj_neg": lambda L: _mod(L, "LSTM", IN, H, proj_size=-1),
    "hidden_0": lambda L: _mod(L, "LSTM", IN, 0),
    "input_0": lambda L: _mod(L, "LSTM", 0, H),
    "layers_0": lambda L: _mod(L, "GRU", IN, H, 0),
    "hidden_float": lambda L: _mod(L, "GRU", IN, 2.5),
    "bias_type": lambda L: _mod(L, "GRU", IN, H, bias=1),
    "cell_input": lambda L: _mod(L, "GRUCell", IN, H)(_z(L, 3, 4)),
    "cell_batch": lambda L: _mod(L, "GRUCell", IN, H)(_z(L, 3, IN), _z(L, 4, H)),
    "cell_hidden": lambda L: _mod(L, "RNNCell", IN, H)(_z(L, 3, IN), _z(L, 3, 5)),
    "cell_rank": lambda L: _mod(L, "LSTMCell", IN, H)(_z(L, 3, IN, 1)),
    "cell_h_rank": lambda L: _mod(L, "LSTMCell", IN, H)(_z(L, 3, IN),
                                                        (_z(L, 3, H), _z(L, 1, 3, H))),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_errors_match_torch(case: str) -> None:
    _same_error(ERRORS[case])


# -- nn.utils.rnn -----------------------------------------------------------------------------

@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("side", ["right", "left"])
def test_pad_sequence(batch_first: bool, side: str) -> None:
    rng = np.random.default_rng(0)
    seqs = [rng.standard_normal((n, 2)).astype(np.float32) for n in (3, 5, 1)]
    want = trnn.pad_sequence([torch.tensor(s) for s in seqs], batch_first, -1.5, side)
    got = grnn.pad_sequence(seqs, batch_first, -1.5, side)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    f = gc.compile(lambda a, b, c: grnn.pad_sequence([a, b, c], batch_first, -1.5, side),
                   dynamic=False)
    np.testing.assert_array_equal(f(*seqs).numpy(), want.numpy())


def test_pad_sequence_errors() -> None:
    with pytest.raises(RuntimeError, match="received an empty list of sequences"):
        grnn.pad_sequence([])
    with pytest.raises(RuntimeError, match="Expected padding_side to be one of left or right"):
        grnn.pad_sequence([np.ones(2, np.float32)], padding_side="up")
    with pytest.raises(RuntimeError, match="trailing shape"):
        grnn.pad_sequence([np.ones((2, 3), np.float32), np.ones((2, 4), np.float32)])


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("enforce_sorted", [True, False])
def test_pack_and_pad_roundtrip(batch_first: bool, enforce_sorted: bool) -> None:
    lengths = [5, 3, 3, 1] if enforce_sorted else [3, 5, 1, 3]
    x = np.random.default_rng(1).standard_normal((4, 6, 2) if batch_first else (6, 4, 2))
    x = x.astype(np.float32)
    tp = trnn.pack_padded_sequence(torch.tensor(x), lengths, batch_first, enforce_sorted)
    gp = grnn.pack_padded_sequence(x, lengths, batch_first, enforce_sorted)
    np.testing.assert_array_equal(gp.data.numpy(), tp.data.numpy())
    np.testing.assert_array_equal(gp.batch_sizes.numpy(), tp.batch_sizes.numpy())
    for a, b in ((gp.sorted_indices, tp.sorted_indices),
                 (gp.unsorted_indices, tp.unsorted_indices)):
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    tpad, tl = trnn.pad_packed_sequence(tp, batch_first, 9.0, total_length=7)
    gpad, gl = grnn.pad_packed_sequence(gp, batch_first, 9.0, total_length=7)
    np.testing.assert_array_equal(gpad.numpy(), tpad.numpy())
    np.testing.assert_array_equal(gl.numpy(), tl.numpy())
    seqs = [np.ones((n, 2), np.float32) * n for n in lengths]
    got = grnn.unpack_sequence(grnn.pack_sequence(seqs, enforce_sorted=enforce_sorted))
    for a, b in zip(got, seqs):
        np.testing.assert_array_equal(a.numpy(), b)


def test_pack_errors() -> None:
    x = np.zeros((4, 3, 2), np.float32)
    for lengths, kw in (([3, 4, 1], {}), ([4, 3], {}), ([4, 3, 0], {"enforce_sorted": False})):
        with pytest.raises(RuntimeError) as te:
            trnn.pack_padded_sequence(torch.tensor(x), lengths, **kw)
        with pytest.raises(RuntimeError) as ge:
            grnn.pack_padded_sequence(x, lengths, **kw)
        assert str(ge.value) == str(te.value)
    p = grnn.pack_padded_sequence(x, [4, 2, 1])
    with pytest.raises(ValueError, match="Expected total_length to be at least"):
        grnn.pad_packed_sequence(p, total_length=2)


@pytest.mark.parametrize("kind", ["rnn_tanh", "lstm", "gru", "lstm_proj"])
def test_packed_input_matches_torch(kind: str) -> None:
    """A bidirectional 2-layer network on an unsorted packed batch: packed output, final
    states (in the caller's order) and gradients of the padded input, h0 and parameters."""
    torch.manual_seed(8)
    tm, gm = _twins(kind, num_layers=2, bidirectional=True, batch_first=True)
    lengths = [3, 6, 1, 4]
    rng = np.random.default_rng(9)
    x = rng.standard_normal((4, 6, IN)).astype(np.float32)
    states = _weights(_state_shapes(kind, 2, True, 4), 10)
    tx, gx = torch.tensor(x, requires_grad=True), gc.tensor(x, requires_grad=True)
    ts = [torch.tensor(s, requires_grad=True) for s in states]
    gs = [gc.tensor(s, requires_grad=True) for s in states]
    pack = (lambda s: tuple(s)) if kind.startswith("lstm") else (lambda s: s[0])
    tout, th = tm(trnn.pack_padded_sequence(tx, lengths, True, False), pack(ts))
    gout, gh = gm(grnn.pack_padded_sequence(gx, lengths, True, False), pack(gs))
    assert isinstance(gout, grnn.PackedSequence)
    _close(gout.data.numpy(), tout.data, "packed output")
    tpad, _ = trnn.pad_packed_sequence(tout, True)
    gpad, _ = grnn.pad_packed_sequence(gout, True)
    _close(gpad.numpy(), tpad, "padded output")
    th, gh = (list(th), list(gh)) if kind.startswith("lstm") else ([th], [gh])
    for a, b in zip(gh, th):
        _close(a.numpy(), b, "final state")
    ws = _weights([tuple(tpad.shape)] + [tuple(h.shape) for h in th], 11)
    (sum((h * torch.tensor(w)).sum() for h, w in zip(th, ws[1:]))
     + (tpad * torch.tensor(ws[0])).sum()).backward()
    (sum((h * gc.tensor(w)).sum() for h, w in zip(gh, ws[1:]))
     + (gpad * gc.tensor(ws[0])).sum()).backward()
    _close(gx.grad.numpy(), tx.grad, "input grad")
    for a, b in zip(gs, ts):
        _close(a.grad.numpy(), b.grad, "state grad")
    tp = dict(tm.named_parameters())
    for name, p in gm.named_parameters():
        _close(p.grad.numpy(), tp[name].grad, f"grad of {name}")


def test_packed_input_in_compiled_step_raises() -> None:
    gm = nn.GRU(IN, H)
    packed = grnn.pack_padded_sequence(np.ones((3, 2, IN), np.float32), [3, 2])

    @gc.compile
    def f(x: Any) -> Any:
        return gm(packed)[1].sum() + x.sum()

    with pytest.raises(NotImplementedError, match="not supported in compiled steps"):
        f(np.ones(2, np.float32))

    @gc.compile
    def g(x: Any) -> Any:
        return gm(grnn.pack_padded_sequence(x, [3, 2]))[1].sum()

    with pytest.raises(NotImplementedError, match="not supported in compiled steps"):
        g(np.ones((3, 2, IN), np.float32))
