"""``nn.TransformerDecoderLayer``, ``nn.TransformerDecoder`` and ``nn.Transformer`` against
PyTorch: a PyTorch model's state_dict loads into the graphc model; a training step (SGD over
the model and two input scales, whose gradients are the inputs' gradients) gives the same
outputs, parameter gradients and updated parameters eagerly and compiled (one compile over two
batch sizes), in train and eval mode, with and without masks, batch_first both ways and
norm_first both ways; default initialisation, masks, dropout, float64 and PyTorch's errors;
a decoder step lowers to PTX that ptxas assembles."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _torch import torch

import graphc as gc
from graphc import nn, optim

E, T_LEN, S_LEN = 8, 4, 5


def _close(a: Any, b: Any, what: str, rtol: float = 2e-4) -> None:
    """Relative closeness, with an absolute floor scaled to the largest entry (key-bias
    gradients are zero in exact arithmetic and rounding noise in both frameworks)."""
    b = np.asarray(b)
    atol = max(2e-5, 4e-6 * float(np.abs(b).max(initial=0.0)))
    np.testing.assert_allclose(np.asarray(a), b, rtol=rtol, atol=atol, err_msg=what)


def _load(gm: nn.Module, tm: torch.nn.Module) -> None:
    gm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})


_rng = np.random.default_rng(7)
_TGT_BOOL = _rng.random((T_LEN, T_LEN)) > 0.6  # True = masked (MultiheadAttention's rule)
np.fill_diagonal(_TGT_BOOL, False)  # every query sees itself
_MEM_FLOAT = _rng.standard_normal((T_LEN, S_LEN)).astype(np.float32)
_SRC_BOOL = _rng.random((S_LEN, S_LEN)) > 0.6
np.fill_diagonal(_SRC_BOOL, False)
_CAUSAL = np.triu(np.full((T_LEN, T_LEN), -np.inf, np.float32), 1)


def _kpm(n: int, s: int) -> np.ndarray:
    """A key padding mask: the last key of every sequence, and one more in the first."""
    m = np.zeros((n, s), bool)
    m[:, -1] = True
    m[0, 1] = True
    return m


def _gelu_callable(x: Any) -> Any:
    return x * (x * 1.702).sigmoid()


def _masks(lib: Any, kw: dict[str, Any]) -> dict[str, Any]:
    conv = torch.tensor if lib is torch.nn else (lambda a: a)
    return {k: conv(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}


def _dec_fwd(**kw: Any) -> Callable[..., Any]:
    """Forward of a decoder (layer): extras are (tgt_key_padding_mask,
    memory_key_padding_mask) or none."""
    def fwd(m: Any, lib: Any, tgt: Any, mem: Any, *extra: Any) -> Any:
        kp = dict(zip(("tgt_key_padding_mask", "memory_key_padding_mask"), extra))
        return m(tgt, mem, **kp, **_masks(lib, kw))
    return fwd


def _tr_fwd(**kw: Any) -> Callable[..., Any]:
    """Forward of a Transformer(src=mem, tgt): extras are the three key padding masks."""
    def fwd(m: Any, lib: Any, tgt: Any, mem: Any, *extra: Any) -> Any:
        kp = dict(zip(("src_key_padding_mask", "tgt_key_padding_mask",
                       "memory_key_padding_mask"), extra))
        return m(mem, tgt, **kp, **_masks(lib, kw))
    return fwd


def _decoder(lib: Any, **kw: Any) -> Any:
    layer = lib.TransformerDecoderLayer(E, 2, 12, dropout=0.0, **kw)
    return lib.TransformerDecoder(layer, 2, norm=lib.LayerNorm(E))


def _transformer(lib: Any, **kw: Any) -> Any:
    return lib.Transformer(E, 2, 1, 2, 12, dropout=0.0, **kw)


def _kpm2(b: int) -> list[np.ndarray]:
    return [_kpm(b, T_LEN), _kpm(b, S_LEN)]


def _kpm3(b: int) -> list[np.ndarray]:
    return [_kpm(b, S_LEN), _kpm(b, T_LEN), _kpm(b, S_LEN)]


# name -> (factory(lib), batch_first, forward(model, lib, tgt, mem, *extras), extras(b))
CASES: dict[str, tuple[Callable[[Any], Any], bool, Callable[..., Any],
                       Callable[[int], list]]] = {
    "layer_post_seq_first": (lambda m: m.TransformerDecoderLayer(E, 2, 16, dropout=0.0),
                             False, _dec_fwd(), lambda b: []),
    "layer_pre_gelu_masks": (lambda m: m.TransformerDecoderLayer(
        E, 2, 16, dropout=0.0, activation="gelu", norm_first=True, batch_first=True,
        layer_norm_eps=1e-3), True,
        _dec_fwd(tgt_mask=_TGT_BOOL, memory_mask=_MEM_FLOAT), _kpm2),
    "layer_callable_nobias_causal": (lambda m: m.TransformerDecoderLayer(
        E, 4, 8, dropout=0.0, activation=_gelu_callable, batch_first=True, bias=False), True,
        _dec_fwd(tgt_mask=_CAUSAL, tgt_is_causal=True), lambda b: []),
    "decoder_pre_bf_masks": (lambda m: _decoder(m, batch_first=True, norm_first=True), True,
                             _dec_fwd(tgt_mask=_CAUSAL), _kpm2),
    "decoder_post_seq_first": (lambda m: _decoder(m), False,
                               _dec_fwd(memory_mask=_MEM_FLOAT > 1.0),
                               lambda b: [_kpm(b, T_LEN), _kpm(b, S_LEN)]),
    "transformer_post_bf_masks": (lambda m: _transformer(m, batch_first=True), True,
                                  _tr_fwd(src_mask=_SRC_BOOL, tgt_mask=_CAUSAL,
                                          memory_mask=_MEM_FLOAT), _kpm3),
    "transformer_pre_gelu_seq_first": (lambda m: _transformer(
        m, norm_first=True, activation="gelu"), False, _tr_fwd(tgt_mask=_CAUSAL), _kpm3),
    "transformer_nobias_plain": (lambda m: _transformer(m, batch_first=True, bias=False),
                                 True, _tr_fwd(), lambda b: []),
}

# compiled eval mode for a few cases (each compile of a transformer step takes seconds)
_COMPILED_EVAL = {"layer_pre_gelu_masks", "transformer_pre_gelu_seq_first"}


def _make(name: str) -> tuple[nn.Module, torch.nn.Module]:
    factory = CASES[name][0]
    torch.manual_seed(0)
    tm = factory(torch.nn)
    gm = factory(nn)
    with torch.no_grad():  # non-trivial biases and norm affines
        for p in tm.parameters():
            p.add_(torch.linspace(-0.3, 0.3, p.numel()).reshape(p.shape))
    _load(gm, tm)
    return gm, tm


def _shapes(batch_first: bool, b: int) -> tuple[tuple, tuple]:
    if batch_first:
        return (b, T_LEN, E), (b, S_LEN, E)
    return (T_LEN, b, E), (S_LEN, b, E)


@pytest.mark.filterwarnings("ignore:enable_nested_tensor")
@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_trains_like_torch(name: str, mode: str, train: bool) -> None:
    if mode == "compiled" and not train and name not in _COMPILED_EVAL:
        pytest.skip("compiled eval mode is covered by a few cases (compiles are slow)")
    _, batch_first, fwd, extras_of = CASES[name]
    gm, tm = _make(name)
    gm.train(train)
    tm.train(train)
    rng = np.random.default_rng(0)
    s_t = np.linspace(0.5, 1.5, T_LEN * E, dtype=np.float32).reshape(T_LEN, 1, E)
    s_m = np.linspace(1.2, 0.6, S_LEN * E, dtype=np.float32).reshape(S_LEN, 1, E)
    if batch_first:
        s_t, s_m = s_t.transpose(1, 0, 2), s_m.transpose(1, 0, 2)
    gst, gsm = nn.Parameter(s_t), nn.Parameter(s_m)
    tst, tsm = torch.nn.Parameter(torch.tensor(s_t)), torch.nn.Parameter(torch.tensor(s_m))
    gopt = optim.SGD([*gm.parameters(), gst, gsm], lr=0.02)
    topt = torch.optim.SGD([*tm.parameters(), tst, tsm], lr=0.02)

    def step(tgt: Any, mem: Any, *extra: Any) -> Any:
        gopt.zero_grad()
        out = fwd(gm, nn, tgt * gst, mem * gsm, *extra)
        (out * out.tanh()).sum().backward()
        gopt.step()
        return out

    n_extra = len(extras_of(3))
    # the batch dim is symbolic: dim 1 of sequence-first inputs, dim 0 of the masks
    dynamic = None if batch_first else {0: (1,), 1: (1,), **{2 + i: (0,)
                                                            for i in range(n_extra)}}
    fn = gc.compile(step, dynamic=dynamic) if mode == "compiled" else step
    for it, b in enumerate((3, 5)):
        t_shape, m_shape = _shapes(batch_first, b)
        tgt = rng.standard_normal(t_shape).astype(np.float32)
        mem = rng.standard_normal(m_shape).astype(np.float32)
        extra = extras_of(b)
        topt.zero_grad()
        tout = fwd(tm, torch.nn, torch.tensor(tgt) * tst, torch.tensor(mem) * tsm,
                   *[torch.tensor(e) for e in extra])
        (tout * tout.tanh()).sum().backward()
        tgrads = {k: p.grad.numpy().copy() for k, p in tm.named_parameters()}
        tin = (tst.grad.numpy().copy(), tsm.grad.numpy().copy())
        topt.step()
        out = fn(tgt, mem, *extra)
        what = f"{name} (call {it})"
        _close(out, tout.detach().numpy(), f"{what} output")
        _close(gst.grad.numpy(), tin[0], f"{what} tgt grad", rtol=5e-4)
        _close(gsm.grad.numpy(), tin[1], f"{what} memory grad", rtol=5e-4)
        gparams = dict(gm.named_parameters())
        assert set(gparams) == set(tgrads)
        for k, p in gparams.items():
            _close(p.grad.numpy(), tgrads[k], f"{what} grad {k}", rtol=5e-4)
        tsd, gsd = tm.state_dict(), gm.state_dict()
        assert list(gsd) == list(tsd)
        for k, v in tsd.items():
            _close(gsd[k], v.numpy(), f"{what} updated {k}", rtol=5e-4)
    if mode == "compiled":
        assert fn.compile_count == 1


def test_float64_and_unbatched() -> None:
    """A float64 Transformer, and 2-D (unbatched) sequences, eagerly."""
    torch.manual_seed(1)
    tm = torch.nn.Transformer(E, 2, 1, 1, 12, dropout=0.0, dtype=torch.float64)
    gm = nn.Transformer(E, 2, 1, 1, 12, dropout=0.0, dtype=gc.float64)
    _load(gm, tm)
    assert all(p.dtype == gc.float64 for p in gm.parameters())
    rng = np.random.default_rng(1)
    src, tgt = rng.standard_normal((S_LEN, 2, E)), rng.standard_normal((T_LEN, 2, E))
    mask = nn.Transformer.generate_square_subsequent_mask(T_LEN, dtype=gc.float64)
    tout = tm(torch.tensor(src), torch.tensor(tgt), tgt_mask=torch.tensor(mask.numpy()))
    out = gm(src, tgt, tgt_mask=mask)
    assert out.dtype == gc.float64
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-10, atol=1e-12)
    tm32 = torch.nn.Transformer(E, 2, 1, 1, 12, dropout=0.0, batch_first=True)
    gm32 = nn.Transformer(E, 2, 1, 1, 12, dropout=0.0, batch_first=True)
    _load(gm32, tm32)
    s1, t1 = src[:, 0].astype(np.float32), tgt[:, 0].astype(np.float32)
    kp = np.zeros(S_LEN, bool)
    kp[-1] = True
    tout = tm32(torch.tensor(s1), torch.tensor(t1), memory_key_padding_mask=torch.tensor(kp),
                src_key_padding_mask=torch.tensor(kp))
    out = gm32(s1, t1, memory_key_padding_mask=kp, src_key_padding_mask=kp)
    assert tuple(out.shape) == (T_LEN, E)
    _close(out.numpy(), tout.detach().numpy(), "unbatched")


def test_square_subsequent_mask() -> None:
    for n in (1, 4):
        want = torch.nn.Transformer.generate_square_subsequent_mask(n).numpy()
        got = nn.Transformer.generate_square_subsequent_mask(n)
        assert got.dtype == gc.float32
        np.testing.assert_array_equal(got.numpy(), want)
    got = nn.Transformer.generate_square_subsequent_mask(3, dtype=gc.float64)
    assert got.dtype == gc.float64
    np.testing.assert_array_equal(got.numpy(), np.triu(np.full((3, 3), -np.inf), 1))


@pytest.mark.filterwarnings("ignore:enable_nested_tensor")
def test_default_init_matches_torch() -> None:
    """Names, shapes and dtypes as PyTorch's; the Transformer re-draws every matrix with
    xavier_uniform_ (so the cloned layers differ), while a bare TransformerDecoder's clones are
    copies; biases start at zero where PyTorch's do."""
    torch.manual_seed(2)
    tm = torch.nn.Transformer(16, 4, 2, 2, 24)
    gc.manual_seed(2)
    gm = nn.Transformer(16, 4, 2, 2, 24)
    tsd, gsd = tm.state_dict(), gm.state_dict()
    assert list(gsd) == list(tsd)
    for k, v in tsd.items():
        assert gsd[k].shape == tuple(v.shape) and gsd[k].dtype == v.numpy().dtype, k
    for name, p in gm.named_parameters():
        a = p.numpy()
        if a.ndim > 1:
            bound = np.sqrt(6.0 / (a.shape[0] + a.shape[1]))
            assert np.abs(a).max() <= bound + 1e-6 and a.std() > bound / 4, name
        elif "in_proj_bias" in name or "out_proj.bias" in name or "norm" in name:
            np.testing.assert_array_equal(a, tsd[name].numpy(), err_msg=name)
    w0, w1 = (gm.decoder.layers[i].linear1.weight.numpy() for i in range(2))
    assert not np.array_equal(w0, w1)
    dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(16, 4, 24), 2)
    w0, w1 = (dec.layers[i].linear1.weight.numpy() for i in range(2))
    np.testing.assert_array_equal(w0, w1)
    assert dec.layers[0].linear1.weight is not dec.layers[1].linear1.weight


def test_dropout_eager_matches_compiled() -> None:
    """Dropout in all three residual branches, the feed-forward block and attention: eager
    and compiled draw the same masks under one seed; eval mode is deterministic."""
    gc.manual_seed(0)
    m = nn.TransformerDecoderLayer(E, 2, 16, dropout=0.3, batch_first=True)
    rng = np.random.default_rng(3)
    tgt = rng.standard_normal((3, T_LEN, E)).astype(np.float32)
    mem = rng.standard_normal((3, S_LEN, E)).astype(np.float32)

    def step(tgt: Any, mem: Any) -> Any:
        out = m(tgt, mem)
        out.sum().backward()
        return out

    gc.manual_seed(9)
    a = np.asarray(step(tgt, mem)).copy()
    gc.manual_seed(9)
    c = np.asarray(gc.compile(step)(tgt, mem))
    np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6)
    m.eval()
    np.testing.assert_array_equal(m(tgt, mem).numpy(), m(tgt, mem).numpy())
    assert not np.allclose(m(tgt, mem).numpy(), a)


@pytest.mark.filterwarnings("ignore:enable_nested_tensor")
@pytest.mark.parametrize("case", ["activation", "batch", "features", "tgt_causal",
                                  "memory_causal"])
def test_errors_match_torch(case: str) -> None:
    x4, x5 = np.zeros((T_LEN, 2, E), np.float32), np.zeros((S_LEN, 2, E), np.float32)

    def run(lib: Any, conv: Any) -> Any:
        if case == "activation":
            return lib.TransformerDecoderLayer(E, 2, activation="tanh")
        if case in ("batch", "features"):
            m = lib.Transformer(E, 2, 1, 1, 12)
            tgt = np.zeros((T_LEN, 3, E) if case == "batch" else (T_LEN, 2, 6), np.float32)
            return m(conv(x5), conv(tgt))
        layer = lib.TransformerDecoderLayer(E, 2, 12, dropout=0.0)
        return layer(conv(x4), conv(x5), **{f"{case.split('_')[0]}_is_causal": True})

    with pytest.raises(Exception) as want:
        run(torch.nn, torch.tensor)
    with pytest.raises(want.type) as got:
        run(nn, gc.tensor)
    assert str(got.value) == str(want.value)


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not installed")
def test_decoder_step_lowers_to_ptx(tmp_path: Path) -> None:
    """A decoder layer's training step (dropout included) is built from primitives the PTX
    backend lowers: the cuda step's PTX assembles (no GPU needed)."""
    m = nn.TransformerDecoderLayer(E, 2, 12, dropout=0.1, batch_first=True, norm_first=True)
    opt = optim.SGD(m.parameters(), lr=0.1)
    mask = nn.Transformer.generate_square_subsequent_mask(T_LEN)

    def step(tgt: Any, mem: Any, kpm: Any) -> Any:
        opt.zero_grad()
        out = m(tgt, mem, tgt_mask=mask, memory_key_padding_mask=kpm)
        (out * out).sum().backward()
        opt.step()
        return out

    args = (np.ones((2, T_LEN, E), np.float32), np.ones((2, S_LEN, E), np.float32),
            _kpm(2, S_LEN))
    text = gc.compile(step, device="cuda", example_args=args).ir("ptx")
    src = tmp_path / "k.ptx"
    src.write_text(text)
    res = subprocess.run([shutil.which("ptxas") or "ptxas", "--gpu-name", "sm_80", "-O3",
                          str(src), "-o", str(tmp_path / "k.cubin")], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-4000:]
