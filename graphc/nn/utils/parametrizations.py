"""``nn.utils.parametrizations``: ``weight_norm``, ``spectral_norm`` and ``orthogonal``, the
parametrizations PyTorch ships, built on ``nn.utils.parametrize`` with PyTorch's classes
(``_WeightNorm``, ``_SpectralNorm``, ``_Orthogonal``), buffers and formulas, so state_dicts
(``parametrizations.weight.original0/original1``, ``parametrizations.weight.0._u``) load both
ways and the same seed gives the same initial power-iteration vectors.

Each ``forward`` is tensor ops, so a parametrized layer trains inside a compiled step like any
other; ``spectral_norm``'s power iteration updates its ``_u``/``_v`` buffers in place under
``no_grad`` in training mode, which a compiled step records as state updates (as batch norm's
running statistics). ``orthogonal`` needs a QR decomposition when it is registered or assigned
(``gc.linalg.qr``, looked up then) and, for its default map on square matrices, a matrix
exponential, which graphc lacks: reading a weight with that map raises
``NotImplementedError`` naming the maps that work (``cayley``, ``householder``).
"""

from __future__ import annotations

from enum import Enum, auto
from typing import Any

import numpy as np

from ... import _core
from ... import linalg as _linalg
from ...autograd import no_grad
from ...tensor import Tensor
from .. import functional as F
from ..module import Module
from . import parametrize

__all__ = ["orthogonal", "spectral_norm", "weight_norm"]


# -- weight norm ------------------------------------------------------------------------------
def _norm_except_dim(v: Tensor, dim: int) -> Tensor:
    """``torch.norm_except_dim(v, 2, dim)``: the 2-norm over every dim but ``dim`` (kept, size
    1); ``dim == -1`` is the norm of the whole tensor (0-d), other negative dims wrap."""
    if dim == -1:
        return (v * v).sum().sqrt()
    dim = dim % v.ndim
    axes = tuple(a for a in range(v.ndim) if a != dim)
    return (v * v).sum(axes, keepdim=True).sqrt() if axes else v.abs()


def _weight_norm(v: Tensor, g: Tensor, dim: int) -> Tensor:
    """``torch._weight_norm(v, g, dim)``: ``v * (g / ||v||)``, the norm per ``dim`` slice."""
    return v * (g / _norm_except_dim(v, dim))


class _WeightNorm(Module):
    """``weight = g * v / ||v||`` from ``original0 = g`` (the magnitudes) and
    ``original1 = v`` (the directions)."""

    def __init__(self, dim: int | None = 0) -> None:
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, weight_g: Tensor, weight_v: Tensor) -> Tensor:
        return _weight_norm(weight_v, weight_g, self.dim)

    def right_inverse(self, weight: Tensor) -> tuple[Tensor, Tensor]:
        return _norm_except_dim(weight, self.dim), weight


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """Reparametrize ``module.<name>`` as ``g * v / ||v||`` (norm over every dim but
    ``dim``; ``dim=None`` the whole tensor). A checkpoint saved from the older
    ``nn.utils.weight_norm`` (``<name>_g``, ``<name>_v``) still loads: its keys are renamed
    by a ``load_state_dict`` pre-hook, as PyTorch's."""
    parametrize.register_parametrization(module, name, _WeightNorm(dim), unsafe=True)

    def _weight_norm_compat_hook(state_dict: Any, prefix: str, *_: Any) -> None:
        g_key, v_key = f"{prefix}{name}_g", f"{prefix}{name}_v"
        if g_key in state_dict and v_key in state_dict:
            original0 = state_dict.pop(g_key)
            original1 = state_dict.pop(v_key)
            state_dict[f"{prefix}parametrizations.{name}.original0"] = original0
            state_dict[f"{prefix}parametrizations.{name}.original1"] = original1

    module._register_load_state_dict_pre_hook(_weight_norm_compat_hook)
    return module


# -- spectral norm ----------------------------------------------------------------------------
class _SpectralNorm(Module):
    """``weight / sigma``, ``sigma`` the largest singular value of the weight (as a matrix
    with ``dim`` first) estimated by power iteration on the buffers ``_u`` and ``_v``; a 1-D
    weight is just normalised."""

    def __init__(self, weight: Tensor, n_power_iterations: int = 1, dim: int = 0,
                 eps: float = 1e-12) -> None:
        super().__init__()
        ndim = weight.ndim
        if dim >= ndim or dim < -ndim:
            raise IndexError("Dimension out of range (expected to be in range of "
                             f"[-{ndim}, {ndim - 1}] but got {dim})")
        if n_power_iterations <= 0:
            raise ValueError("Expected n_power_iterations to be positive, but got "
                             f"n_power_iterations={n_power_iterations}")
        self.dim = dim if dim >= 0 else dim + ndim
        self.eps = eps
        if ndim > 1:
            self.n_power_iterations = n_power_iterations
            weight_mat = self._reshape_weight_to_matrix(weight.detach())
            h, w = weight_mat.shape
            with no_grad():  # PyTorch's draws: u then v, standard normal, then normalised
                u = _core.empty(h, dtype=weight.dtype).normal_(0, 1)
                v = _core.empty(w, dtype=weight.dtype).normal_(0, 1)
                self.register_buffer("_u", F.normalize(u, dim=0, eps=self.eps))
                self.register_buffer("_v", F.normalize(v, dim=0, eps=self.eps))
            self._power_method(weight_mat, 15)

    def _reshape_weight_to_matrix(self, weight: Tensor) -> Tensor:
        if self.dim != 0:
            weight = weight.permute(self.dim, *(d for d in range(weight.ndim) if d != self.dim))
        return weight.flatten(1)

    def _power_method(self, weight_mat: Tensor, n_power_iterations: int) -> None:
        """``n`` power iterations written into ``_u`` and ``_v`` (in place, no gradient):
        eagerly the buffers change, in a compiled step they are state updates."""
        with no_grad():
            for _ in range(n_power_iterations):
                self._u._assign(F.normalize(_core.mv(weight_mat, self._v), dim=0,
                                            eps=self.eps))
                self._v._assign(F.normalize(_core.mv(weight_mat.T, self._u), dim=0,
                                            eps=self.eps))

    def forward(self, weight: Tensor) -> Tensor:
        if weight.ndim == 1:
            return F.normalize(weight, dim=0, eps=self.eps)
        weight_mat = self._reshape_weight_to_matrix(weight)
        if self.training:
            self._power_method(weight_mat, self.n_power_iterations)
        u, v = self._u.clone(), self._v.clone()
        sigma = _core.vdot(u, _core.mv(weight_mat, v))
        return weight / sigma

    def right_inverse(self, value: Tensor) -> Tensor:
        return value


def spectral_norm(module: Module, name: str = "weight", n_power_iterations: int = 1,
                  eps: float = 1e-12, dim: int | None = None) -> Module:
    """Reparametrize ``module.<name>`` as ``weight / sigma(weight)`` (spectral
    normalisation); ``dim`` defaults to 0, 1 for transposed convolutions (their output
    channels)."""
    from ..layers2d import ConvTranspose1d, ConvTranspose2d
    from ..layers3d import ConvTranspose3d

    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    if dim is None:
        dim = 1 if isinstance(module, (ConvTranspose1d, ConvTranspose2d,
                                       ConvTranspose3d)) else 0
    parametrize.register_parametrization(
        module, name, _SpectralNorm(weight, n_power_iterations, dim, eps))
    return module


# -- orthogonal -------------------------------------------------------------------------------
class _OrthMaps(Enum):
    matrix_exp = auto()
    cayley = auto()
    householder = auto()


def _qr(what: str) -> Any:
    """``gc.linalg.qr``, looked up when needed (it may be added after this module loaded)."""
    qr = getattr(_linalg, "qr", None)
    if qr is None:
        raise NotImplementedError(f"orthogonal: {what} needs a QR decomposition "
                                  "(gc.linalg.qr), which this graphc does not have")
    return qr


def _make_orthogonal(a: Tensor) -> Tensor:
    """The Q of ``a = QR`` with ``diag(R) >= 0`` (PyTorch's ``geqrf`` + ``householder_product``
    form; that Q is unique, so any QR gives it after the sign fix)."""
    q, r = _qr("making the initial matrix orthogonal")(a)
    return q * r.diagonal(dim1=-2, dim2=-1).sign().unsqueeze(-2)


def _is_orthogonal(q: Tensor) -> bool:
    n, k = q.shape[-2], q.shape[-1]
    qa = q.numpy().astype(np.float64)
    eps = 10.0 * n * np.finfo(q.dtype.np).eps
    return bool(np.allclose(np.swapaxes(qa, -1, -2) @ qa, np.eye(k), atol=eps, rtol=1e-5))


class _Orthogonal(Module):
    """An orthogonal matrix (or batch) from an unconstrained one: ``matrix_exp`` or
    ``cayley`` of its skew-symmetric part, or a product of Householder reflectors; with
    ``use_trivialization`` the result multiplies the buffer ``base`` (set on assignment)."""

    def __init__(self, weight: Tensor, orthogonal_map: _OrthMaps, *,
                 use_trivialization: bool = True) -> None:
        super().__init__()
        self.shape = tuple(weight.shape)
        self.orthogonal_map = orthogonal_map
        if use_trivialization:
            self.register_buffer("base", None)

    def forward(self, X: Tensor) -> Tensor:  # noqa: N803 (PyTorch's name)
        n, k = X.shape[-2], X.shape[-1]
        transposed = n < k
        if transposed:
            X = X.mT
            n, k = k, n
        if self.orthogonal_map in (_OrthMaps.matrix_exp, _OrthMaps.cayley):
            X = X.tril()
            if n != k:
                X = _core.cat([X, X.new_zeros(n, n - k).expand(*X.shape[:-2], -1, -1)],
                              dim=-1)
            A = X - X.mT
            if self.orthogonal_map == _OrthMaps.matrix_exp:
                matrix_exp = getattr(_core, "matrix_exp", None) or getattr(
                    _linalg, "matrix_exp", None)
                if matrix_exp is None:
                    raise NotImplementedError(
                        "orthogonal_map='matrix_exp' (the default for square matrices) needs "
                        "a matrix exponential, which graphc does not have; pass "
                        "orthogonal_map='cayley' or 'householder'")
                Q = matrix_exp(A)
            else:
                eye = _core.eye(n, dtype=A.dtype)
                Q = _linalg.solve(eye - 0.5 * A, eye + 0.5 * A)
            if n != k:
                Q = Q[..., :k]
        else:
            A = X.tril(diagonal=-1)
            tau = 2.0 / (1.0 + (A * A).sum(dim=-2))
            Q = _linalg.householder_product(A, tau)
            Q = Q * X.diagonal(dim1=-2, dim2=-1).int().unsqueeze(-2)
        if "base" in self._buffers:
            Q = self.base @ Q
        if transposed:
            Q = Q.mT
        return Q

    def right_inverse(self, Q: Tensor) -> Tensor:  # noqa: N803 (PyTorch's name)
        with no_grad():
            if tuple(Q.shape) != self.shape:
                raise ValueError(f"Expected a matrix or batch of matrices of shape "
                                 f"{_size(self.shape)}. Got a tensor of shape {_size(Q.shape)}.")
            q_init = Q
            n, k = Q.shape[-2], Q.shape[-1]
            transpose = n < k
            if transpose:
                Q = Q.mT
                n, k = k, n
            if "base" not in self._buffers:
                if self.orthogonal_map in (_OrthMaps.cayley, _OrthMaps.matrix_exp):
                    raise NotImplementedError(
                        "It is not possible to assign to the matrix exponential or the Cayley "
                        "parametrizations when use_trivialization=False.")
                a = _geqrf_reflectors(Q)
                return a.mT if transpose else a
            if n == k:
                Q = Q.clone() if _is_orthogonal(Q) else _make_orthogonal(Q)
            else:
                N = _core.randn(*(tuple(Q.shape[:-2]) + (n, n - k)), dtype=Q.dtype)
                Q = _make_orthogonal(_core.cat([Q, N], dim=-1))
            self.base = Q
            n0, k0 = q_init.shape[-2], q_init.shape[-1]
            neg_id = -_core.eye(n0, k0, dtype=q_init.dtype)
            return neg_id.expand(*q_init.shape).clone()


def _geqrf_reflectors(q: Tensor) -> Tensor:
    """PyTorch's ``use_trivialization=False`` inverse of the householder map: the Householder
    reflectors of ``q``'s QR (``torch.geqrf``'s packed form, here LAPACK's through numpy's
    ``qr(mode='raw')``; ``right_inverse`` runs eagerly, on values) with the diagonal
    replaced by the signs of R's, negated where LAPACK chose no reflection (``tau == 0``)."""
    qa = q.numpy()
    n, k = qa.shape[-2], qa.shape[-1]
    mats = qa.reshape(-1, n, k).astype(np.float64)
    out = np.empty_like(mats)
    for i, m in enumerate(mats):
        h, tau = np.linalg.qr(m, mode="raw")
        a = h.T.copy()
        d = np.sign(np.diagonal(a)).copy()
        d[tau == 0.0] *= -1
        np.fill_diagonal(a, d)
        out[i] = a
    return Tensor._from_array(out.reshape(qa.shape).astype(qa.dtype))


def _size(shape: Any) -> str:
    return f"torch.Size({list(shape)})"


def orthogonal(module: Module, name: str = "weight", orthogonal_map: str | None = None, *,
               use_trivialization: bool = True) -> Module:
    """Reparametrize the matrix (or batch) ``module.<name>`` to stay orthogonal. The default
    map is ``matrix_exp`` for square matrices (not available in graphc: it raises when the
    weight is read, naming the maps that work) and ``householder`` otherwise."""
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    if weight.ndim < 2:
        raise ValueError("Expected a matrix or batch of matrices. Got a tensor of "
                         f"{weight.ndim} dimensions.")
    if orthogonal_map is None:
        orthogonal_map = ("matrix_exp" if weight.shape[-2] == weight.shape[-1]
                          else "householder")
    orth_enum = getattr(_OrthMaps, orthogonal_map, None)
    if orth_enum is None:
        raise ValueError('orthogonal_map has to be one of "matrix_exp", "cayley", '
                         f'"householder". Got: {orthogonal_map}')
    orth = _Orthogonal(weight, orth_enum, use_trivialization=use_trivialization)
    parametrize.register_parametrization(module, name, orth, unsafe=True)
    return module
