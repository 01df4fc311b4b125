"""Recurrent layers (``nn.RNN``, ``nn.LSTM``, ``nn.GRU``) and their cells, as torch.nn's.

Parameter names (``weight_ih_l{k}[_reverse]``, ``weight_hh_l{k}``, ``bias_ih_l{k}``,
``bias_hh_l{k}``, ``weight_hr_l{k}``), shapes, gate order and initialisation
(``U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))`` for every parameter, in registration order,
from graphc's generator) follow PyTorch, so ``load_state_dict`` works in both directions. The
computation is in ``graphc/nn/_frnn.py``: one input-projection matmul per layer and direction,
then one time loop (``_frnn.recurrence``) that a compiled step unrolls today.
"""

from __future__ import annotations

import math
import numbers
import warnings
from typing import Any

import numpy as np

from .. import _core, amp
from .. import tensor_ops as T
from ..ir import dtypes as dt
from ..tensor import Tensor
from . import _frnn, init
from .layers2d import _np_dtype
from .module import Module, Parameter
from .utils.rnn import PackedSequence, packed_from_padded, padded_from_packed, step_mask

__all__ = ["RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]

_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


class RNNBase(Module):
    """What RNN, LSTM and GRU share: the parameters of every layer and direction, argument
    checks with PyTorch's messages, and the forward over plain or packed input."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, proj_size: int = 0, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        if (not isinstance(dropout, numbers.Number) or isinstance(dropout, bool)
                or not 0 <= dropout <= 1):
            raise ValueError("dropout should be a number in range [0, 1] representing the "
                             "probability of an element being zeroed")
        if dropout > 0 and num_layers == 1:
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so "
                          "non-zero dropout expects num_layers greater than 1, but got "
                          f"dropout={dropout} and num_layers={num_layers}", stacklevel=3)
        if not isinstance(bias, bool):
            raise TypeError(f"bias should be of type bool, got: {type(bias).__name__}")
        if not isinstance(batch_first, bool):
            raise TypeError(f"batch_first should be of type bool, got: "
                            f"{type(batch_first).__name__}")
        if not isinstance(input_size, int):
            raise TypeError(f"input_size should be of type int, got: "
                            f"{type(input_size).__name__}")
        if input_size <= 0:
            raise ValueError("input_size must be greater than zero")
        if not isinstance(hidden_size, int):
            raise TypeError(f"hidden_size should be of type int, got: "
                            f"{type(hidden_size).__name__}")
        if hidden_size <= 0:
            raise ValueError("hidden_size must be greater than zero")
        if num_layers <= 0:
            raise ValueError("num_layers must be greater than zero")
        if proj_size < 0:
            raise ValueError("proj_size should be a positive integer or zero to disable "
                             "projections")
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        if mode not in _GATES:
            raise ValueError("Unrecognized RNN mode: " + mode)
        self.mode = mode
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, float(dropout)
        self.bidirectional, self.proj_size = bidirectional, proj_size
        gate_size = _GATES[mode] * hidden_size
        dirs = 2 if bidirectional else 1
        real_hidden = proj_size if proj_size > 0 else hidden_size
        npd = _np_dtype(dtype)
        self._flat_weights_names: list[str] = []
        self._all_weights: list[list[str]] = []
        for layer in range(num_layers):
            for direction in range(dirs):
                layer_in = input_size if layer == 0 else real_hidden * dirs
                suffix = "_reverse" if direction == 1 else ""
                shapes = [("weight_ih", (gate_size, layer_in)),
                          ("weight_hh", (gate_size, real_hidden))]
                if bias:
                    shapes += [("bias_ih", (gate_size,)), ("bias_hh", (gate_size,))]
                if proj_size > 0:
                    shapes += [("weight_hr", (proj_size, hidden_size))]
                names = []
                for base, shape in shapes:
                    name = f"{base}_l{layer}{suffix}"
                    setattr(self, name, Parameter(np.empty(shape, npd)))
                    names.append(name)
                self._flat_weights_names.extend(names)
                self._all_weights.append(names)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    @property
    def _flat_weights(self) -> list[Tensor | None]:
        return [getattr(self, n, None) for n in self._flat_weights_names]

    @property
    def all_weights(self) -> list[list[Parameter]]:
        """The parameters of each layer and direction, ``[w_ih, w_hh, (b_ih, b_hh), (w_hr)]``."""
        return [[getattr(self, n) for n in names] for names in self._all_weights]

    def flatten_parameters(self) -> None:
        """PyTorch packs the weights for cuDNN here; graphc needs no packing (a no-op)."""

    def _layer_weights(self) -> list[tuple[Tensor | None, ...]]:
        """``(w_ih, w_hh, b_ih, b_hh, w_hr)`` per layer and direction (None where absent)."""
        out = []
        for names in self._all_weights:
            d = {n.split("_l")[0]: getattr(self, n) for n in names}
            out.append((d["weight_ih"], d["weight_hh"], d.get("bias_ih"), d.get("bias_hh"),
                        d.get("weight_hr")))
        return out

    # -- argument checks (PyTorch's messages) -------------------------------------------------
    def check_input(self, input: Tensor, batch_sizes: Any) -> None:  # noqa: A002
        w = self._flat_weights[0]
        if input.dtype != w.dtype:
            raise ValueError(f"RNN input dtype ({input.dtype}) does not match weight dtype "
                             f"({w.dtype}). Convert input: input.to({w.dtype}), or convert "
                             f"model: model.to({input.dtype})")
        expected = 2 if batch_sizes is not None else 3
        if input.ndim != expected:
            raise RuntimeError(f"input must have {expected} dimensions, got {input.ndim}")
        if self.input_size != input.shape[-1]:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected "
                               f"{self.input_size}, got {input.shape[-1]}")

    def get_expected_hidden_size(self, input: Tensor, batch_sizes: Any) -> tuple:  # noqa: A002
        if batch_sizes is not None:
            mini_batch = int(batch_sizes[0])
        else:
            mini_batch = input.shape[0] if self.batch_first else input.shape[1]
        dirs = 2 if self.bidirectional else 1
        size = self.proj_size if self.proj_size > 0 else self.hidden_size
        return (self.num_layers * dirs, mini_batch, size)

    def get_expected_cell_size(self, input: Tensor, batch_sizes: Any) -> tuple:  # noqa: A002
        h = self.get_expected_hidden_size(input, batch_sizes)
        return (h[0], h[1], self.hidden_size)

    @staticmethod
    def check_hidden_size(hx: Tensor, expected: tuple,
                          msg: str = "Expected hidden size {}, got {}") -> None:
        from ..ir import shapes as sh

        if len(hx.shape) != len(expected) or not all(
                sh.same(a, b) for a, b in zip(hx.shape, expected)):
            text = msg.format(expected, list(hx.shape))
            if not all(isinstance(sh.dim(d), int) for d in (*hx.shape, *expected)):
                text += (" (in a compiled step the first dimension of every argument is "
                         "symbolic by default, and a state's batch axis is its second: mark the "
                         "batch axes instead, e.g. gc.compile(fn, dynamic={'x': (0,), "
                         "'h0': (1,)}))")
            raise RuntimeError(text)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        return s

    # -- forward ------------------------------------------------------------------------------
    def _states(self, hx: Any) -> tuple[Tensor, ...] | None:
        """``hx`` as a tuple of tensors (LSTM's ``(h, c)``; the others' single ``h``)."""
        if hx is None:
            return None
        if self.mode == "LSTM":
            if not isinstance(hx, (tuple, list)) or len(hx) != 2:
                raise TypeError("LSTM: hx must be a tuple (h_0, c_0) of two tensors")
            return (T.as_tensor(hx[0]), T.as_tensor(hx[1]))
        return (T.as_tensor(hx),)

    def _check_hx(self, x: Tensor, hx: tuple[Tensor, ...], batch_sizes: Any) -> None:
        self.check_input(x, batch_sizes)
        if self.mode == "LSTM":
            self.check_hidden_size(hx[0], self.get_expected_hidden_size(x, batch_sizes),
                                   "Expected hidden[0] size {}, got {}")
            self.check_hidden_size(hx[1], self.get_expected_cell_size(x, batch_sizes),
                                   "Expected hidden[1] size {}, got {}")
        else:
            self.check_hidden_size(hx[0], self.get_expected_hidden_size(x, batch_sizes))

    def _zeros(self, batch: Any, dtype: Any) -> tuple[Tensor, ...]:
        dirs = 2 if self.bidirectional else 1
        real_hidden = self.proj_size if self.proj_size > 0 else self.hidden_size
        h = _core.zeros((self.num_layers * dirs, batch, real_hidden), dtype=dtype)
        if self.mode != "LSTM":
            return (h,)
        return (h, _core.zeros((self.num_layers * dirs, batch, self.hidden_size), dtype=dtype))

    def _run(self, x: Tensor, hx: tuple[Tensor, ...],
             mask: Tensor | None = None) -> tuple[Tensor, tuple[Tensor, ...]]:
        return _frnn.rnn_forward(self.mode, x, hx, self._layer_weights(), self.num_layers,
                                 self.bidirectional, self.dropout, self.training, mask)

    def _forward_packed(self, packed: PackedSequence, hx: Any) -> tuple[Any, Any]:
        if _frnn.tracing():
            raise NotImplementedError(
                f"{type(self).__name__}: packed input (PackedSequence) is not supported in "
                "compiled steps: which rows exist at each time step depends on the lengths' "
                "values. Pass the padded batch (and mask the loss) inside a compiled step, or "
                "run the packed sequence eagerly")
        data, batch_sizes = packed.data, packed.batch_sizes.numpy()
        states = self._states(hx)
        if states is None:
            states = self._zeros(int(batch_sizes[0]), data.dtype)
        elif packed.sorted_indices is not None:
            states = tuple(s.index_select(1, packed.sorted_indices) for s in states)
        self._check_hx(data, states, batch_sizes)
        x = padded_from_packed(data, batch_sizes)
        out, final = self._run(x, states, step_mask(batch_sizes))
        out = PackedSequence(packed_from_padded(out, batch_sizes), packed.batch_sizes,
                             packed.sorted_indices, packed.unsorted_indices)
        if packed.unsorted_indices is not None:
            final = tuple(s.index_select(1, packed.unsorted_indices) for s in final)
        return out, final if self.mode == "LSTM" else final[0]

    def _autocast_layer(self, x: Tensor) -> Any:
        """The dtype an autocast region runs this module in as one lower-precision op, or
        None. PyTorch's CPU ``lstm`` on a padded float input without projections runs as
        oneDNN's ``mkldnn_rnn_layer``, which is on the CPU autocast list: input, states and
        weights in bf16, every result bf16. Its GRU and RNN (and a packed or projected
        LSTM) are composites of autocast ops instead, whose dtypes the ops give here too."""
        s = amp.state()
        if (s is None or self.mode != "LSTM" or self.proj_size or x.dtype is dt.float64
                or not x.dtype.is_float or any(isinstance(d, int) and d == 0 for d in x.shape)):
            return None
        return s[1]

    def forward(self, input: Any, hx: Any = None) -> tuple[Any, Any]:  # noqa: A002
        if isinstance(input, PackedSequence):
            return self._forward_packed(input, hx)
        x = T.as_tensor(input)
        name = "RNN" if self.mode.startswith("RNN") else self.mode
        if x.ndim not in (2, 3):
            extra = " tensor" if name == "RNN" else ""
            raise ValueError(f"{name}: Expected input to be 2D or 3D, got {x.ndim}D{extra} "
                             "instead")
        batched = x.ndim == 3
        batch_dim = 0 if self.batch_first else 1
        states = self._states(hx)
        if states is not None:
            want = 3 if batched else 2
            if any(s.ndim != want for s in states):
                kind = "batched 3-D" if batched else "unbatched 2-D"
                if self.mode == "LSTM":
                    raise RuntimeError(f"For {kind} input, hx and cx should also be {want}-D "
                                       f"but got ({states[0].ndim}-D, {states[1].ndim}-D) "
                                       "tensors")
                raise RuntimeError(f"For {kind} input, hx should also be {want}-D but got "
                                   f"{states[0].ndim}-D tensor")
            if not batched:
                states = tuple(s.unsqueeze(1) for s in states)
        if not batched:
            x = x.unsqueeze(batch_dim)
        if states is None:
            states = self._zeros(x.shape[batch_dim], x.dtype)
        self._check_hx(x, states, None)
        low = self._autocast_layer(x)
        if low is not None:  # input and states enter rounded to the lower precision; the
            x = x.to(low)    # recurrence carries its states in float32, as oneDNN's does
            states = tuple(s.to(low).to(s.dtype) if s.dtype is dt.float32 else s
                           for s in states)
        if self.batch_first:
            x = x.transpose(0, 1)
        out, final = self._run(x, states)
        if low is not None:
            out, final = out.to(low), tuple(s.to(low) for s in final)
        if self.batch_first:
            out = out.transpose(0, 1)
        if not batched:
            out = out.squeeze(batch_dim)
            final = tuple(s.squeeze(1) for s in final)
        return out, (final if self.mode == "LSTM" else final[0])


class RNN(RNNBase):
    """Elman RNN: ``h_t = act(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)``, act tanh or relu.

    ``RNN(input_size, hidden_size, num_layers=1, nonlinearity='tanh', bias=True,
    batch_first=False, dropout=0.0, bidirectional=False, device=None, dtype=None)``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        if len(args) > 3:
            nonlinearity = args[3]
            args = args[:3] + args[4:]
        else:
            nonlinearity = kwargs.pop("nonlinearity", "tanh")
        if nonlinearity == "tanh":
            mode = "RNN_TANH"
        elif nonlinearity == "relu":
            mode = "RNN_RELU"
        else:
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' "
                             "or 'relu'.")
        super().__init__(mode, *args, **kwargs)
        self.nonlinearity = nonlinearity


class LSTM(RNNBase):
    """LSTM (gates ``i, f, g, o``), with optional projections (``proj_size``: the hidden state
    is ``(o * tanh(c)) W_hr^T``). Returns ``(output, (h_n, c_n))``.

    ``LSTM(input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
    bidirectional=False, proj_size=0, device=None, dtype=None)``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__("LSTM", *args, **kwargs)


class GRU(RNNBase):
    """GRU (gates ``r, z, n``; ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``,
    ``h' = (1 - z) * n + z * h``).

    ``GRU(input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
    bidirectional=False, device=None, dtype=None)``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        super().__init__("GRU", *args, **kwargs)


class RNNCellBase(Module):
    """One time step as a module: ``weight_ih`` ``(chunks*H, I)``, ``weight_hh``
    ``(chunks*H, H)``, ``bias_ih``/``bias_hh`` ``(chunks*H,)``, initialised as the layers."""


    def __init__(self, input_size: int, hidden_size: int, bias: bool, num_chunks: int,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        npd = _np_dtype(dtype)
        self.weight_ih = Parameter(np.empty((num_chunks * hidden_size, input_size), npd))
        self.weight_hh = Parameter(np.empty((num_chunks * hidden_size, hidden_size), npd))
        if bias:
            self.bias_ih = Parameter(np.empty(num_chunks * hidden_size, npd))
            self.bias_hh = Parameter(np.empty(num_chunks * hidden_size, npd))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s

    def _check(self, x: Tensor, states: tuple[Tensor, ...]) -> None:
        """ATen's cell checks (``check_rnn_cell_forward_input/hidden``)."""
        from ..ir import shapes as sh

        if not sh.same(x.shape[1], self.input_size):
            raise RuntimeError(f"input has inconsistent input_size: got {x.shape[1]} expected "
                               f"{self.input_size}")
        for i, s in enumerate(states):
            if not sh.same(s.shape[0], x.shape[0]):
                raise RuntimeError(f"Input batch size {x.shape[0]} doesn't match hidden{i} "
                                   f"batch size {s.shape[0]}")
            if not sh.same(s.shape[1], self.hidden_size):
                raise RuntimeError(f"hidden{i} has inconsistent hidden_size: got "
                                   f"{s.shape[1]}, expected {self.hidden_size}")

    def _step(self, mode: str, input: Any,  # noqa: A002
              states: tuple[Any, ...] | None) -> tuple[Tensor, ...]:
        x = T.as_tensor(input)
        name = type(self).__name__
        if x.ndim not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1D or 2D, got {x.ndim}D instead")
        ts = None if states is None else tuple(T.as_tensor(s) for s in states)
        for i, s in enumerate(ts or ()):
            if s.ndim not in (1, 2):
                what = f"hx[{i}]" if mode == "LSTM" else "hidden"
                raise ValueError(f"{name}: Expected {what} to be 1D or 2D, got {s.ndim}D "
                                 "instead")
        batched = x.ndim == 2
        if not batched:
            x = x.unsqueeze(0)
        if ts is None:
            z = _core.zeros((x.shape[0], self.hidden_size), dtype=x.dtype)
            ts = (z, z) if mode == "LSTM" else (z,)
        elif not batched:
            ts = tuple(s.unsqueeze(0) for s in ts)
        self._check(x, ts)
        out = _frnn.rnn_cell(mode, x, ts, self.weight_ih, self.weight_hh, self.bias_ih,
                             self.bias_hh)
        return out if batched else tuple(s.squeeze(0) for s in out)


class RNNCell(RNNCellBase):
    """``h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh)`` (act ``tanh`` or ``relu``)."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 nonlinearity: str = "tanh", device: Any = None, dtype: Any = None) -> None:
        super().__init__(input_size, hidden_size, bias, 1, device, dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input: Any, hx: Any = None) -> Tensor:  # noqa: A002
        if self.nonlinearity not in ("tanh", "relu"):
            raise RuntimeError(f"Unknown nonlinearity: {self.nonlinearity}")
        mode = "RNN_TANH" if self.nonlinearity == "tanh" else "RNN_RELU"
        return self._step(mode, input, None if hx is None else (hx,))[0]


class LSTMCell(RNNCellBase):
    """One LSTM step; ``forward(input, (h, c)) -> (h', c')``."""


    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__(input_size, hidden_size, bias, 4, device, dtype)

    def forward(self, input: Any, hx: Any = None) -> tuple[Tensor, Tensor]:  # noqa: A002
        h, c = self._step("LSTM", input, None if hx is None else tuple(hx))
        return h, c


class GRUCell(RNNCellBase):
    """One GRU step; ``forward(input, h) -> h'``."""


    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__(input_size, hidden_size, bias, 3, device, dtype)

    def forward(self, input: Any, hx: Any = None) -> Tensor:  # noqa: A002
        return self._step("GRU", input, None if hx is None else (hx,))[0]
