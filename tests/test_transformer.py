"""Attention, transformer-encoder and normalisation layers against PyTorch: a PyTorch module's
state_dict loads into the graphc module; outputs, input gradients and parameter gradients
match eagerly and compiled (one compile over two batch sizes where the first dim may vary)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from _torch import torch

import graphc as gc
from graphc import nn
from graphc.nn import functional as F

RTOL = 2e-4
MODES = ["eager", "compiled"]
tF = torch.nn.functional


def _close(a: Any, b: Any, what: str, rtol: float = RTOL) -> None:
    """Relative closeness, with an absolute floor scaled to the largest entry (a key-bias
    gradient is zero in exact arithmetic and rounding noise in both frameworks)."""
    b = np.asarray(b)
    atol = max(2e-5, 2e-6 * float(np.abs(b).max(initial=0.0)))
    np.testing.assert_allclose(np.asarray(a), b, rtol=rtol, atol=atol, err_msg=what)


def _load(gm: nn.Module, tm: torch.nn.Module) -> None:
    gm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})


def _rng_bool(shape: tuple, seed: int = 5) -> np.ndarray:
    m = np.random.default_rng(seed).random(shape) > 0.35
    return m


_MASK_LS = _rng_bool((4, 4))
_MASK_LS[:, 0] = True  # every query sees at least one key
_FMASK = np.random.default_rng(6).standard_normal((4, 4)).astype(np.float32)
_CAUSAL_T = np.triu(np.ones((4, 4), bool), 1)  # MultiheadAttention convention: True = masked


def _kpm(n: int, s: int) -> np.ndarray:
    m = np.zeros((n, s), bool)
    m[:, -1] = True
    m[0, 1] = True
    return m


# name -> (factory(lib), input shapes per batch size b, forward(module, lib, x, *extras),
#          extra inputs(b), whether the first dim varies across the compiled calls)
Case = tuple[Callable[[Any], Any], Callable[[int], tuple], Callable[..., Any],
             Callable[[int], list], bool]


def _mha_fwd(**kw: Any) -> Callable[..., Any]:
    def fwd(m: Any, lib: Any, x: Any, *extra: Any) -> Any:
        kpm = extra[0] if extra else None
        out, w = m(x, x, x, key_padding_mask=kpm, **_masks(lib, kw))
        return out if w is None else (out, w)
    return fwd


def _masks(lib: Any, kw: dict[str, Any]) -> dict[str, Any]:
    conv = torch.tensor if lib is torch.nn else (lambda a: a)
    return {k: conv(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}


def _mha_cross(m: Any, lib: Any, x: Any) -> Any:  # kdim/vdim differ: key/value from x's halves
    return m(x, x[..., :3] * 2.0, x[..., 2:] - 1.0, need_weights=False)[0]


def _layer_fwd(**kw: Any) -> Callable[..., Any]:
    def fwd(m: Any, lib: Any, x: Any, *extra: Any) -> Any:
        kpm = extra[0] if extra else None
        return m(x, src_key_padding_mask=kpm, **_masks(lib, kw))
    return fwd


def _call(m: Any, lib: Any, x: Any, *extra: Any) -> Any:
    return m(x, *extra)


def _enc(lib: Any, **kw: Any) -> Any:
    layer = lib.TransformerEncoderLayer(8, 2, 12, dropout=0.0, **kw)
    return lib.TransformerEncoder(layer, 2, norm=lib.LayerNorm(8))


def _gelu_callable(x: Any) -> Any:
    return x * (x * 1.702).sigmoid()


CASES: dict[str, Case] = {
    "mha_seq_first": (lambda m: m.MultiheadAttention(8, 2), lambda b: (b, 3, 8), _mha_fwd(),
                      lambda b: [], True),
    "mha_batch_first": (lambda m: m.MultiheadAttention(8, 4, batch_first=True),
                        lambda b: (b, 4, 8), _mha_fwd(average_attn_weights=False),
                        lambda b: [], True),
    "mha_masks": (lambda m: m.MultiheadAttention(8, 2, batch_first=True),
                  lambda b: (b, 4, 8), _mha_fwd(attn_mask=~_MASK_LS),
                  lambda b: [_kpm(b, 4)], True),
    "mha_float_mask_noweights": (lambda m: m.MultiheadAttention(8, 2, batch_first=True),
                                 lambda b: (b, 4, 8), _mha_fwd(attn_mask=_FMASK,
                                                               need_weights=False),
                                 lambda b: [_kpm(b, 4)], True),
    "mha_causal": (lambda m: m.MultiheadAttention(8, 2, batch_first=True, bias=False),
                   lambda b: (b, 4, 8), _mha_fwd(attn_mask=_CAUSAL_T, is_causal=True,
                                                 need_weights=False), lambda b: [], True),
    "mha_unbatched": (lambda m: m.MultiheadAttention(8, 2), lambda b: (b, 8), _mha_fwd(),
                      lambda b: [], True),
    "mha_kdim_vdim": (lambda m: m.MultiheadAttention(8, 2, kdim=3, vdim=6),
                      lambda b: (b, 2, 8), _mha_cross, lambda b: [], True),
    "enc_layer_post": (lambda m: m.TransformerEncoderLayer(8, 2, 16, dropout=0.0),
                       lambda b: (b, 3, 8), _layer_fwd(), lambda b: [], True),
    "enc_layer_pre_gelu_bf": (lambda m: m.TransformerEncoderLayer(
        8, 2, 16, dropout=0.0, activation="gelu", norm_first=True, batch_first=True,
        layer_norm_eps=1e-3), lambda b: (b, 4, 8), _layer_fwd(src_mask=~_MASK_LS),
        lambda b: [_kpm(b, 4)], True),
    "enc_layer_callable_nobias": (lambda m: m.TransformerEncoderLayer(
        8, 4, 8, dropout=0.0, activation=_gelu_callable, batch_first=True, bias=False),
        lambda b: (b, 4, 8), _layer_fwd(src_mask=_CAUSAL_T, is_causal=True),
        lambda b: [], True),
    "encoder": (lambda m: _enc(m, batch_first=True, norm_first=True), lambda b: (b, 4, 8),
                _layer_fwd(mask=_FMASK), lambda b: [_kpm(b, 4)], True),
    "encoder_seq_first": (lambda m: _enc(m), lambda b: (4, 3, 8), _layer_fwd(),
                          lambda b: [], False),
    "groupnorm": (lambda m: m.GroupNorm(2, 6), lambda b: (b, 6, 3, 2), _call, lambda b: [],
                  True),
    "groupnorm_noaffine_1d": (lambda m: m.GroupNorm(3, 3, eps=1e-3, affine=False),
                              lambda b: (b, 3, 5), _call, lambda b: [], True),
    "instnorm2d": (lambda m: m.InstanceNorm2d(3), lambda b: (b, 3, 4, 3), _call,
                   lambda b: [], True),
    "instnorm2d_affine_stats": (lambda m: m.InstanceNorm2d(3, affine=True,
                                                           track_running_stats=True),
                                lambda b: (b, 3, 4, 3), _call, lambda b: [], True),
    "instnorm1d_stats": (lambda m: m.InstanceNorm1d(4, momentum=0.3, track_running_stats=True),
                         lambda b: (b, 4, 5), _call, lambda b: [], True),
    "instnorm2d_unbatched": (lambda m: m.InstanceNorm2d(3, affine=True), lambda b: (3, 4, b),
                             _call, lambda b: [], False),
    "rmsnorm": (lambda m: m.RMSNorm(6), lambda b: (b, 2, 6), _call, lambda b: [], True),
    "rmsnorm_2d_eps": (lambda m: m.RMSNorm([2, 6], eps=1e-3), lambda b: (b, 2, 6), _call,
                       lambda b: [], True),
    "rmsnorm_noaffine": (lambda m: m.RMSNorm(6, elementwise_affine=False),
                         lambda b: (b, 6), _call, lambda b: [], True),
    "bilinear": (lambda m: m.Bilinear(5, 5, 3), lambda b: (b, 5),
                 lambda m, lib, x: m(x, x.tanh()), lambda b: [], True),
    "bilinear_nobias_3d": (lambda m: m.Bilinear(4, 3, 2, bias=False), lambda b: (b, 2, 4),
                           lambda m, lib, x: m(x, x[..., 1:] * 0.5), lambda b: [], True),
    "unflatten": (lambda m: m.Sequential(m.Unflatten(1, (2, 3)), m.Tanh()),
                  lambda b: (b, 6, 2), _call, lambda b: [], True),
    "unflatten_neg": (lambda m: m.Unflatten(-1, (2, -1)), lambda b: (b, 6), _call,
                      lambda b: [], True),
}


def _make(name: str) -> tuple[nn.Module, torch.nn.Module]:
    factory = CASES[name][0]
    torch.manual_seed(0)
    tm = factory(torch.nn)
    gm = factory(nn)
    with torch.no_grad():  # non-trivial affine parameters
        for p in tm.parameters():
            p.add_(torch.linspace(-0.3, 0.3, p.numel()).reshape(p.shape))
    _load(gm, tm)
    return gm, tm


def _outs(o: Any) -> list[Any]:
    return list(o) if isinstance(o, tuple) else [o]


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_layer_matches_torch(name: str, mode: str, train: bool) -> None:
    _, shape_of, fwd, extras_of, varies = CASES[name]
    if mode == "compiled" and name == "instnorm2d_unbatched":
        pytest.skip("an unbatched input's channel dim would be the symbolic batch dim")
    gm, tm = _make(name)
    gm.train(train)
    tm.train(train)
    shape0 = shape_of(3)
    rng = np.random.default_rng(0)
    scale = np.linspace(0.5, 1.5, int(np.prod(shape0[1:])), dtype=np.float32)
    scale = scale.reshape(shape0[1:])
    gs = nn.Parameter(scale)
    ts = torch.nn.Parameter(torch.tensor(scale))

    def step(x: Any, *extra: Any) -> Any:
        outs = _outs(fwd(gm, nn, x * gs, *extra))
        sum(((o * o * o).sum() for o in outs), start=outs[0].sum() * 0).backward()
        return outs[0]

    fn = gc.compile(step) if mode == "compiled" else step
    for it, b in enumerate((3, 5) if varies else (3, 3)):
        x = (rng.standard_normal(shape_of(b))).astype(np.float32)
        extra = extras_of(b)
        for p in gm.parameters():
            p.grad = None
        gs.grad = ts.grad = None
        tm.zero_grad()
        touts = _outs(fwd(tm, torch.nn, torch.tensor(x) * ts,
                          *[torch.tensor(e) for e in extra]))
        sum((o * o * o).sum() for o in touts).backward()
        gout = fn(x, *extra)
        _close(np.asarray(gout), touts[0].detach().numpy(), f"{name} output (call {it})")
        _close(gs.grad.numpy(), ts.grad.numpy(), f"{name} input grad (call {it})", rtol=5e-4)
        tparams = dict(tm.named_parameters())
        gparams = dict(gm.named_parameters())
        assert set(gparams) == set(tparams)
        for k, p in gparams.items():
            _close(p.grad.numpy(), tparams[k].grad.numpy(), f"{name} grad {k} (call {it})",
                   rtol=5e-4)
        tsd, gsd = tm.state_dict(), gm.state_dict()
        assert list(gsd) == list(tsd)
        for k, v in tsd.items():
            _close(gsd[k], v.numpy(), f"{name} state {k} (call {it})")
    if mode == "compiled":
        assert fn.compile_count == 1


# -- scaled_dot_product_attention ------------------------------------------------------------

SDPA: dict[str, dict[str, Any]] = {
    "plain": {},
    "causal": {"is_causal": True},
    "bool_mask": {"attn_mask": _MASK_LS},
    "bool_mask_dead_row": {"attn_mask": np.array([[1, 0, 0, 1]] * 2 + [[0] * 4] + [[1] * 4],
                                                 bool)},
    "float_mask": {"attn_mask": _FMASK},
    "scale": {"scale": 0.37},
    "gqa": {"enable_gqa": True},
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", sorted(SDPA))
def test_sdpa_matches_torch(case: str, mode: str) -> None:
    kw = SDPA[case]
    rng = np.random.default_rng(1)
    heads_kv = 2 if case == "gqa" else 4
    ws = [rng.standard_normal((4, 4, 6)).astype(np.float32) for _ in range(2)]
    wv = rng.standard_normal((4, 5)).astype(np.float32)
    gw = [nn.Parameter(w) for w in (*ws, wv)]
    tw = [torch.nn.Parameter(torch.tensor(w)) for w in (*ws, wv)]

    def qkv(lib: Any, x: Any, w: list[Any]) -> tuple[Any, Any, Any]:
        q = x * w[0]
        k = (x * w[1])[:, :heads_kv]
        v = (x[:, :heads_kv, :, :5] * w[2])
        return q, k, v

    def step(x: Any) -> Any:
        out = F.scaled_dot_product_attention(*qkv(nn, x, gw), **kw)
        (out * out * out).sum().backward()
        return out

    fn = gc.compile(step) if mode == "compiled" else step
    tkw = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    for b in (2, 3):
        x = rng.standard_normal((b, 4, 4, 6)).astype(np.float32)
        for p in (*gw, *tw):
            p.grad = None
        tout = tF.scaled_dot_product_attention(*qkv(torch, torch.tensor(x), tw), **tkw)
        (tout * tout * tout).sum().backward()
        out = fn(x)
        _close(np.asarray(out), tout.detach().numpy(), f"{case} output")
        for i, (g, t) in enumerate(zip(gw, tw)):
            _close(g.grad.numpy(), t.grad.numpy(), f"{case} grad {i}", rtol=5e-4)
    if mode == "compiled":
        assert fn.compile_count == 1


def test_sdpa_dropout_statistics() -> None:
    """Dropout on the attention weights: the mean over draws is the no-dropout output, and
    eager and compiled runs draw the same masks under one seed."""
    rng = np.random.default_rng(2)
    q, k = rng.standard_normal((2, 64, 64, 8)).astype(np.float32) * 0.1, None
    k = rng.standard_normal((2, 64, 64, 8)).astype(np.float32) * 0.1
    v = np.ones((2, 64, 64, 8), np.float32)

    def step(q: Any, k: Any, v: Any) -> Any:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.25)

    gc.manual_seed(4)
    a = np.asarray(step(q, k, v))
    gc.manual_seed(4)
    c = np.asarray(gc.compile(step)(q, k, v))
    np.testing.assert_allclose(a, c, rtol=1e-6, atol=1e-7)
    # each output is sum_j w_j * keep_j / 0.75 with sum_j w_j = 1: mean 1 over the draws
    assert abs(a.mean() - 1.0) < 0.01
    tout = tF.scaled_dot_product_attention(torch.tensor(q), torch.tensor(k), torch.tensor(v),
                                           dropout_p=0.25).numpy()
    assert abs(a.std() - tout.std()) < 0.1 * tout.std()


def test_sdpa_errors() -> None:
    x = np.zeros((2, 3, 4), np.float32)
    with pytest.raises(RuntimeError, match="attn_mask"):
        F.scaled_dot_product_attention(x, x, x, attn_mask=np.ones((3, 3), bool), is_causal=True)
    with pytest.raises(NotImplementedError, match="add_bias_kv"):
        nn.MultiheadAttention(4, 2, add_bias_kv=True)
    with pytest.raises(RuntimeError, match="is_causal"):
        nn.MultiheadAttention(4, 2)(x, x, x, is_causal=True)


def test_mha_dropout_trains() -> None:
    """Attention-weight dropout in training mode: eager and compiled agree under one seed."""
    torch.manual_seed(0)
    m = nn.MultiheadAttention(8, 2, dropout=0.5, batch_first=True)
    x = np.random.default_rng(3).standard_normal((3, 5, 8)).astype(np.float32)

    def step(x: Any) -> Any:
        out = m(x, x, x, need_weights=False)[0]
        out.sum().backward()
        return out

    gc.manual_seed(9)
    a = np.asarray(step(x)).copy()
    gc.manual_seed(9)
    c = np.asarray(gc.compile(step)(x))
    np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6)
    m.eval()
    np.testing.assert_allclose(np.asarray(m(x, x, x)[0]), np.asarray(m(x, x, x)[0]))


@pytest.mark.parametrize("cls", ["MultiheadAttention", "Bilinear"])
def test_default_init_matches_torch(cls: str) -> None:
    args = {"MultiheadAttention": (6, 2), "Bilinear": (4, 3, 5)}[cls]
    torch.manual_seed(3)
    tm = getattr(torch.nn, cls)(*args)
    gc.manual_seed(3)
    gm = getattr(nn, cls)(*args)
    for k, v in tm.state_dict().items():
        np.testing.assert_allclose(gm.state_dict()[k], v.numpy(), rtol=1e-6, err_msg=k)


def test_functional_norms() -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 6, 3)).astype(np.float32)
    w = rng.standard_normal(6).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    tx, tw, tb = torch.tensor(x), torch.tensor(w), torch.tensor(b)
    _close(F.group_norm(x, 3, w, b).numpy(), tF.group_norm(tx, 3, tw, tb).numpy(), "group")
    _close(F.instance_norm(x, weight=w, bias=b).numpy(),
           tF.instance_norm(tx, weight=tw, bias=tb).numpy(), "instance")
    _close(F.rms_norm(x, (3,), x[0, 0]).numpy(), tF.rms_norm(tx, (3,), tx[0, 0]).numpy(), "rms")
    wb = rng.standard_normal((2, 3, 4)).astype(np.float32)
    x2 = rng.standard_normal((2, 6, 4)).astype(np.float32)
    _close(F.bilinear(x, x2, wb).numpy(),
           tF.bilinear(tx, torch.tensor(x2), torch.tensor(wb)).numpy(), "bilinear")
    t = gc.tensor(x)
    assert nn.Identity()(t) is t
