"""``nn.AdaptiveLogSoftmaxWithLoss`` (Grave et al., "Efficient softmax approximation for
GPUs"), with PyTorch's constructor, submodules, parameter names, errors and methods.

Why a dense forward: PyTorch's ``forward`` picks each cluster's rows with ``nonzero()`` and
``index_select`` and evaluates a tail cluster only on the rows whose target falls in it, so
its intermediate shapes depend on the targets' values and a compiled step could not trace it.
Here every cluster is evaluated on every row and each row's target log-probability is picked
with a ``gather`` at a clamped index and a ``where`` mask; a row whose target lies outside a
cluster takes an exact 0 (value and gradient) from it, so the outputs, the loss and every
gradient equal PyTorch's (the only cost is the tail projections of rows that PyTorch skips).
``predict`` is likewise the ``argmax`` of ``log_prob``, which is what PyTorch's branches
compute (a shortlist class that wins the head also wins the full distribution, as a cluster's
log-probabilities are at most 0, and ties go to the lower index either way).

Targets outside ``[0, n_classes)``: eagerly PyTorch's ``RuntimeError`` is raised before any
work; in a compiled step the targets pass through a ``gather`` from ``arange(n_classes)``,
whose native bounds check stops the step with ``IndexError`` before anything is committed,
as ``F.cross_entropy``/``F.nll_loss`` targets do (``graphc/nn/_floss.py``).
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import _context
from .. import tensor_ops as T
from ..ir import dtypes as dt
from ..ir import shapes as sh
from ..tensor import Tensor
from . import functional as F
from .layers import Linear, ModuleList, Sequential
from .module import Module

__all__ = ["AdaptiveLogSoftmaxWithLoss"]

_ASMoutput = namedtuple("_ASMoutput", ["output", "loss"])


def _eager() -> bool:
    return _context.current() is None


def _torch_size(shape: Any) -> str:
    """A shape as PyTorch prints ``input.size()`` in its messages."""
    return "torch.Size([" + ", ".join(sh.fmt_dim(d) for d in shape) + "])"


def _class_index_target(t: Tensor) -> Tensor:
    """The target as int64; a float or bool target is refused with the error PyTorch's
    ``gather`` gives it (the first op there that reads it as an index)."""
    if t.dtype.is_float or t.dtype is dt.bool_:
        raise RuntimeError("gather(): Expected dtype int32/int64 for index")
    return t if t.dtype is dt.int64 else t.to(dt.int64)


class AdaptiveLogSoftmaxWithLoss(Module):
    """Adaptive softmax: a head over the ``cutoffs[0]`` most frequent classes plus one entry
    per tail cluster, and per cluster a two-layer low-rank projection (hidden size
    ``in_features // div_value ** (i + 1)``) whose log-softmax is added to the cluster's head
    log-probability. ``forward(input, target)`` returns ``_ASMoutput(output, loss)``: each
    row's target log-probability and their negated mean.

    Targets must be sorted by frequency (class 0 the most frequent), as in PyTorch.
    """

    in_features: int
    n_classes: int
    cutoffs: list[int]
    div_value: float
    head_bias: bool
    head: Linear
    tail: ModuleList

    def __init__(self, in_features: int, n_classes: int, cutoffs: Sequence[int],
                 div_value: float = 4.0, head_bias: bool = False, device: Any = None,
                 dtype: Any = None) -> None:
        factory_kwargs = {"device": device, "dtype": dtype}
        super().__init__()
        cutoffs = list(cutoffs)
        if len(cutoffs) == 0:
            raise ValueError("cutoffs should be a sequence of length larger than 0")
        if (cutoffs != sorted(cutoffs) or min(cutoffs) <= 0 or max(cutoffs) > n_classes - 1
                or len(set(cutoffs)) != len(cutoffs) or any(int(c) != c for c in cutoffs)):
            raise ValueError("cutoffs should be a sequence of unique, positive integers sorted "
                             "in an increasing order, where each value is between 1 and "
                             "n_classes-1")
        self.in_features = in_features
        self.n_classes = n_classes
        self.cutoffs = cutoffs + [n_classes]
        self.div_value = div_value
        self.head_bias = head_bias
        self.shortlist_size = self.cutoffs[0]
        self.n_clusters = len(self.cutoffs) - 1
        self.head_size = self.shortlist_size + self.n_clusters
        self.head = Linear(self.in_features, self.head_size, bias=self.head_bias,
                           **factory_kwargs)
        self.tail = ModuleList()
        for i in range(self.n_clusters):
            hsz = int(self.in_features // (self.div_value ** (i + 1)))
            osz = self.cutoffs[i + 1] - self.cutoffs[i]
            self.tail.append(Sequential(
                Linear(self.in_features, hsz, bias=False, **factory_kwargs),
                Linear(hsz, osz, bias=False, **factory_kwargs),
            ))

    def reset_parameters(self) -> None:
        """Redraw every weight as ``__init__`` drew it (each ``Linear``'s own initialisation)."""
        self.head.reset_parameters()
        for i2h, h2o in self.tail:  # type: ignore[misc]
            i2h.reset_parameters()
            h2o.reset_parameters()

    # -- forward ---------------------------------------------------------------------------
    def _check_shapes(self, x: Tensor, t: Tensor) -> None:
        """PyTorch's shape checks, in its order and with its messages."""
        if t.ndim == 1:
            if x.ndim == 0:
                raise IndexError("Dimension specified as 0 but tensor has no dimensions")
            if not sh.same(x.shape[0], t.shape[0]):
                raise RuntimeError(
                    "Input and target should have the same size in the batch dimension.")
            if x.ndim != 2:
                raise RuntimeError(f"1D target tensor expects 2D input tensors, but found "
                                   f"inputs with size {_torch_size(x.shape)}")
        elif t.ndim == 0:
            if x.ndim != 1:
                raise RuntimeError(f"0D target tensor expects 1D input tensors, but found "
                                   f"inputs with size {_torch_size(x.shape)}")
        else:
            raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")

    def _checked_target(self, t: Tensor) -> Tensor:
        """``t`` with every value in ``[0, n_classes)``: eagerly PyTorch's error otherwise;
        compiled, a gather from ``arange(n_classes)`` (the identity on valid targets) whose
        native bounds check stops the step with ``IndexError`` on an invalid one."""
        if _eager():
            v = t.numpy()
            if v.size and (v.min() < 0 or v.max() >= self.n_classes):
                raise RuntimeError(
                    f"Target values should be in [0, {self.n_classes - 1}], but values in "
                    f"range [{int(v.min())}, {int(v.max())}] were found. ")
            return t
        classes = T.as_tensor(np.arange(self.n_classes, dtype=np.int64))
        return T.gather(classes, 0, t)

    def forward(self, input_: Any, target_: Any) -> _ASMoutput:
        """``_ASMoutput(output, loss)``: ``output[n]`` is ``log p(target[n] | input[n])``
        (shape ``(N)``, or ``()`` for an unbatched ``(in_features)`` input with a 0-d target)
        and ``loss`` is ``-output.mean()``."""
        x, t = T.as_tensor(input_), T.as_tensor(target_)
        self._check_shapes(x, t)
        batched = t.ndim > 0
        if not batched:
            x, t = x.unsqueeze(0), t.unsqueeze(0)
        t = self._checked_target(_class_index_target(t))
        head_lp = F.log_softmax(self.head(x), 1)
        # each row's head column: its class in the shortlist, else its cluster's entry
        head_col = t
        for i in range(self.n_clusters):
            lo = self.cutoffs[i]
            head_col = T.where(t >= lo, self.shortlist_size + i, head_col)
        output = T.gather(head_lp, 1, head_col.unsqueeze(1)).squeeze(1)
        for i in range(self.n_clusters):
            lo, hi = self.cutoffs[i], self.cutoffs[i + 1]
            inside = T.where(t >= lo, t < hi, False)
            cluster_lp = F.log_softmax(self.tail[i](x), 1)
            rel = T.where(inside, t - lo, 0).unsqueeze(1)
            picked = T.gather(cluster_lp, 1, rel).squeeze(1)
            output = output + T.where(inside, picked, 0.0)
        loss = (-output).mean()
        if not batched:
            output = output.squeeze(0)
        return _ASMoutput(output, loss)

    # -- full distribution -----------------------------------------------------------------
    def _full_log_prob(self, x: Tensor, head_output: Tensor) -> Tensor:
        """Log-probabilities of all ``n_classes``: the head's shortlist columns, then each
        cluster's log-softmax plus its head column (PyTorch's ``_get_full_log_prob``)."""
        head_lp = F.log_softmax(head_output, 1)
        parts = [head_lp[:, :self.shortlist_size]]
        for i in range(self.n_clusters):
            col = self.shortlist_size + i
            cluster_lp = F.log_softmax(self.tail[i](x), 1)
            parts.append(cluster_lp + head_lp[:, col:col + 1])
        return T.cat(parts, 1)

    def _minibatch(self, input: Any) -> Tensor:  # noqa: A002
        """An ``(N, in_features)`` input; a 0-d or 1-D one raises the ``IndexError`` PyTorch's
        ``log_softmax(dim=1)`` raises on it, a 3-D or larger one a ``RuntimeError`` (PyTorch
        fails or returns shapes that do not follow its documentation)."""
        x = T.as_tensor(input)
        if x.ndim < 2:
            raise IndexError("Dimension out of range (expected to be in range of [-1, 0], but "
                             "got 1)")
        if x.ndim > 2:
            raise RuntimeError(f"log_prob() and predict() expect an (N, in_features) input, "
                               f"but found inputs with size {_torch_size(x.shape)}")
        return x

    def log_prob(self, input: Any) -> Tensor:  # noqa: A002
        """Log-probabilities of every class, shape ``(N, n_classes)``, for an
        ``(N, in_features)`` input."""
        x = self._minibatch(input)
        return self._full_log_prob(x, self.head(x))

    def predict(self, input: Any) -> Tensor:  # noqa: A002
        """The most probable class of each row, shape ``(N)``: ``log_prob(input).argmax(1)``
        (what PyTorch's shortcut branches return, computed densely so it also traces)."""
        return T.argmax(self.log_prob(input), 1)
