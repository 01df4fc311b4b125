"""Functional recurrent layers: the cell steps of RNN/LSTM/GRU and the time recurrence.

Why this shape: every recurrent layer here is "one matmul for the input projection of all time
steps, then a loop that only does the hidden-state GEMM and the gates" (cuDNN's split). The loop
lives in exactly one function, :func:`recurrence`: eagerly a Python loop over the time axis,
under tracing one ``scan`` node (``gc.scan``), so a compiled step is not specialised on the
sequence length. The steps passed to it are pure functions of ``(x_t, state)`` and the weights
they close over, which is what lets the scan trace them once.

Gate layouts are PyTorch's (LSTM ``i, f, g, o``; GRU ``r, z, n`` with
``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``), so a PyTorch ``state_dict`` loads unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .. import _context, amp
from .. import tensor_ops as T
from ..ir import dtypes as dt
from ..ir import shapes as sh
from ..loops import scan
from ..tensor import Tensor
from . import functional as F

State = tuple[Tensor, ...]
Step = Callable[[Tensor, State], tuple[Tensor, State]]


def _static_length(xs: Tensor) -> int:
    """The number of time steps of an eager run (a plain number there)."""
    n = int(sh.dim(xs.shape[0]))
    if n <= 0:
        raise RuntimeError("Expected sequence length to be larger than 0 in RNN")
    return n


def _scan_recurrence(step: Step, xs: Tensor, state0: State, reverse: bool,
                     mask: Tensor | None) -> tuple[Tensor, State]:
    """The traced form of :func:`recurrence`: one ``scan`` node (``gc.scan``), the step
    traced once, the trip count the time axis's size (a symbol when it is dynamic)."""
    n = sh.dim(xs.shape[0])
    if isinstance(n, int) and n <= 0:
        raise RuntimeError("Expected sequence length to be larger than 0 in RNN")
    seqs = (xs,) if mask is None else (xs, mask)

    def body(state: State, x: State) -> tuple[State, tuple[Tensor]]:
        out, new = step(x[0], state)
        if mask is not None:
            m = x[1]
            new = tuple(T.where(m, a, b) for a, b in zip(new, state, strict=True))
            out = T.where(m, out, 0.0)
        return new, (out,)

    final, (outs,) = scan(body, state0, seqs, reverse)
    return outs, final


def recurrence(step: Step, xs: Tensor, state0: State, reverse: bool = False,
               mask: Tensor | None = None) -> tuple[Tensor, State]:
    """Run ``step`` along the time axis (dim 0) of ``xs`` from ``state0``.

    ``step(x_t, state) -> (out_t, new_state)``. Returns the outputs stacked in time order
    (``[T, ...]``) and the final state. ``reverse`` walks from the last step to the first (the
    backward direction of a bidirectional layer; outputs still come back in time order).
    ``mask`` (``[T, B, 1]`` bool, optional) marks the valid steps of each batch row (packed
    sequences): where it is False the state is carried unchanged and the output is zero, so a
    row's final state is the one after its own last step, and the reverse direction of a row
    starts at its own end.

    This is the only time loop of the recurrent layers (see the module docstring): a Python loop
    eagerly, one ``scan`` node when traced (the same steps, so the two agree).
    """
    if _context.current() is not None:
        return _scan_recurrence(step, xs, state0, reverse, mask)
    n = _static_length(xs)
    outs: list[Tensor | None] = [None] * n
    state = state0
    for t in (range(n - 1, -1, -1) if reverse else range(n)):
        out, new = step(xs[t], state)
        if mask is not None:
            m = mask[t]
            new = tuple(T.where(m, a, b) for a, b in zip(new, state, strict=True))
            out = T.where(m, out, 0.0)
        outs[t] = out
        state = new
    return T.stack(outs, 0), state


# ---------------------------------------------------------------------------------------------
# One time step of each cell, given the precomputed input projection ``gi = x W_ih^T + b_ih``,
# or, with ``b_ih`` given, ``gi = x W_ih^T`` and the bias added inside the step (a whole
# layer: the broadcast add is free in the loop body, while added to the projection of every
# time step it is a pass over a [T, B, G] tensor, and another in the backward). The sum is
# the same, ``(x W_ih^T + b_ih) + ...``, so the values are too.

def _with_bias(gi: Tensor, b_ih: Tensor | None) -> Tensor:
    return gi if b_ih is None else gi + b_ih


def rnn_step(w_hh: Tensor, b_hh: Tensor | None, nonlinearity: str,
             b_ih: Tensor | None = None) -> Step:
    """Elman step: ``h' = act(gi + h W_hh^T + b_hh)``."""
    act = F.tanh if nonlinearity == "tanh" else F.relu

    def step(gi: Tensor, state: State) -> tuple[Tensor, State]:
        h = act(_with_bias(gi, b_ih) + F.linear(state[0], w_hh, b_hh))
        return h, (h,)

    return step


def lstm_step(w_hh: Tensor, b_hh: Tensor | None, w_hr: Tensor | None = None,
              b_ih: Tensor | None = None) -> Step:
    """LSTM step (gates ``i, f, g, o``); with ``w_hr`` the hidden state is projected
    (``h' = (o * tanh(c')) W_hr^T``, PyTorch's ``proj_size``)."""

    def step(gi: Tensor, state: State) -> tuple[Tensor, State]:
        h, c = state
        gates = _with_bias(gi, b_ih) + F.linear(h, w_hh, b_hh)
        i, f, g, o = gates.chunk(4, -1)
        c2 = f.sigmoid() * c + i.sigmoid() * g.tanh()
        h2 = o.sigmoid() * c2.tanh()
        if w_hr is not None:
            h2 = F.linear(h2, w_hr)
        return h2, (h2, c2)

    return step


def gru_step(w_hh: Tensor, b_hh: Tensor | None, b_ih: Tensor | None = None) -> Step:
    """GRU step (gates ``r, z, n``): the reset gate scales ``W_hn h + b_hn`` (PyTorch's and
    cuDNN's form, not the original paper's ``W_hn (r * h)``)."""

    def step(gi: Tensor, state: State) -> tuple[Tensor, State]:
        h = state[0]
        gh = F.linear(h, w_hh, b_hh)
        i_r, i_z, i_n = _with_bias(gi, b_ih).chunk(3, -1)
        h_r, h_z, h_n = gh.chunk(3, -1)
        r = (i_r + h_r).sigmoid()
        z = (i_z + h_z).sigmoid()
        n = (i_n + r * h_n).tanh()
        h2 = n + z * (h - n)
        return h2, (h2,)

    return step


def make_step(mode: str, weights: Sequence[Tensor | None], inner_bias: bool = False) -> Step:
    """The step of ``mode`` (``RNN_TANH``, ``RNN_RELU``, ``LSTM``, ``GRU``) from one layer and
    direction's ``(w_ih, w_hh, b_ih, b_hh, w_hr)``; ``inner_bias``: the step adds ``b_ih``
    to a projection computed without it."""
    _, w_hh, b_ih, b_hh, w_hr = weights
    b_in = b_ih if inner_bias else None
    if mode == "LSTM":
        return lstm_step(w_hh, b_hh, w_hr, b_in)
    if mode == "GRU":
        return gru_step(w_hh, b_hh, b_in)
    return rnn_step(w_hh, b_hh, "tanh" if mode == "RNN_TANH" else "relu", b_in)


# ---------------------------------------------------------------------------------------------
# Whole layers

def rnn_layer(mode: str, x: Tensor, state0: State, weights: Sequence[Tensor | None],
              reverse: bool = False, mask: Tensor | None = None) -> tuple[Tensor, State]:
    """One layer and direction over ``x`` (``[T, B, I]``): the input projection of every time
    step as one matmul (``[T, B, G]``), then the recurrence over the hidden-state GEMM."""
    w_ih, _, b_ih, _, w_hr = weights
    low = amp.state()
    if (low is not None and state0[0].dtype is dt.float32
            and (mode.startswith("RNN") or (mode == "LSTM" and w_hr is not None))):
        # under autocast an Elman cell's h (and a projected LSTM's) leaves every step in the
        # lower precision (its last op is an autocast matmul, or an activation of one) and
        # enters the next only through another (h @ W_hh^T, which rounds it there anyway):
        # start it in that dtype, so the carry keeps one dtype from the first step on (a
        # traced scan needs that), with the same values
        state0 = (state0[0].to(low[1]), *state0[1:])
    if not tracing() or low is not None:
        # eagerly every step would pay one more op: add the bias to all of them; under
        # autocast too, where the bias inside the projection (an autocast linear) is
        # rounded with it, as eager and PyTorch have it, not added in float32 afterwards
        return recurrence(make_step(mode, weights), F.linear(x, w_ih, b_ih), state0, reverse,
                          mask)
    gi = F.linear(x, w_ih)
    return recurrence(make_step(mode, weights, inner_bias=True), gi, state0, reverse, mask)


def rnn_forward(mode: str, x: Tensor, hx: State, weights: Sequence[Sequence[Tensor | None]],
                num_layers: int, bidirectional: bool, dropout: float, training: bool,
                mask: Tensor | None = None) -> tuple[Tensor, State]:
    """A stacked (and optionally bidirectional) recurrent network, PyTorch's ``_VF.rnn_*``.

    ``x``: ``[T, B, I]`` (time first). ``hx``: the initial states, each ``[L*D, B, *]`` (``(h,)``
    or ``(h, c)``). ``weights[layer * D + direction]`` = ``(w_ih, w_hh, b_ih, b_hh, w_hr)``.
    Dropout is applied to every layer's output except the last, in training mode only.
    Returns the last layer's output ``[T, B, D*H_out]`` and the final states stacked as ``hx``.
    """
    dirs = 2 if bidirectional else 1
    finals: list[State] = []
    layer_in = x
    for layer in range(num_layers):
        outs = []
        for d in range(dirs):
            k = layer * dirs + d
            state0 = tuple(s[k] for s in hx)
            out, state = rnn_layer(mode, layer_in, state0, weights[k], reverse=d == 1, mask=mask)
            outs.append(out)
            finals.append(state)
        layer_in = outs[0] if dirs == 1 else T.cat(outs, -1)
        if dropout > 0 and training and layer < num_layers - 1:
            layer_in = F.dropout(layer_in, dropout, True)
    return layer_in, tuple(T.stack([f[i] for f in finals], 0) for i in range(len(hx)))


def rnn_cell(mode: str, x: Tensor, state: State, w_ih: Tensor, w_hh: Tensor,
             b_ih: Tensor | None, b_hh: Tensor | None) -> State:
    """One step of a cell module (``RNNCell``/``LSTMCell``/``GRUCell``) on ``[B, I]``."""
    step = make_step(mode, (w_ih, w_hh, b_ih, b_hh, None))
    return step(F.linear(x, w_ih, b_ih), state)[1]


def tracing() -> bool:
    """Whether a compiled step is being traced (packed sequences are eager-only)."""
    return _context.current() is not None


__all__ = ["recurrence", "rnn_step", "lstm_step", "gru_step", "make_step", "rnn_layer",
           "rnn_forward", "rnn_cell", "tracing"]
