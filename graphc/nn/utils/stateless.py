"""``nn.utils.stateless.functional_call`` (``torch.func.functional_call``'s older home): call a
module with some of its parameters and buffers replaced by given tensors.

PyTorch's mechanism, kept: the given tensors are swapped into the modules' parameter and
buffer tables (``module._parameters[name] = tensor``, bypassing the ``Parameter`` check), the
module is called, and the originals are swapped back, also when the call raises. Anything the
module reads through ``self.weight`` therefore sees the replacement: a traced tensor inside a
compiled step (gradients flow to whatever it was computed from), a plain tensor eagerly.

Inside a compiled step one more thing is needed: a step guards the contents of each module it
runs (replacing ``model.fc.weight`` between calls re-traces), snapshotting them the first time
the module is seen. The swap must not be what that snapshot records, so every module involved
is noted with its own tensors before the swap.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

from ... import _context
from ...tensor import Tensor
from ..module import Module

__all__ = ["functional_call"]

_MISSING: Any = object()


def _named_tensors(module: Module) -> Iterator[tuple[str, Tensor]]:
    """Every parameter then every buffer by every name it has (tied ones repeated), as
    ``named_parameters(remove_duplicate=False)`` and ``named_buffers(...)`` give them."""
    mods = list(module.named_modules(remove_duplicate=False))
    for store in ("_parameters", "_buffers"):
        for prefix, m in mods:
            for n, t in m.__dict__[store].items():
                if t is not None:
                    yield (f"{prefix}.{n}" if prefix else n), t


def _untie(module: Module, given: dict[str, Any]) -> dict[str, Any]:
    """``given`` extended to every name of a tied tensor one of whose names is given;
    different values for one tied tensor raise, as PyTorch's ``_untie_named_tensors_map``."""
    names_of: dict[int, set[str]] = {}
    for name, t in _named_tensors(module):
        names_of.setdefault(id(t), set()).add(name)
    tied = {n: names for names in names_of.values() if len(names) > 1 for n in names}
    out = dict(given)
    for name in [n for n in given if n in tied]:
        group = tied[name]
        given_in_group = group.intersection(given)
        if len(given_in_group) > 1 and len({id(given[n]) for n in given_in_group}) != 1:
            raise ValueError(f"functional_call got multiple values for keys {sorted(group)}, "
                             "which are tied. Consider using tie_weights=False")
        for other in group:
            out[other] = given[name]
    return out


def _owner(module: Module, path: str) -> tuple[Module, str]:
    prefix, _, attr = path.rpartition(".")
    sub = module
    if prefix:
        for part in prefix.split("."):
            try:
                nxt = getattr(sub, part)
            except AttributeError as ex:
                raise AttributeError(f"{type(sub).__name__} has no attribute `{part}`") from ex
            if not isinstance(nxt, Module):
                raise TypeError(f"submodule `{prefix}`: {nxt} is not an instance of "
                                "torch.nn.Module")
            sub = nxt
    return sub, attr


def _swap(module: Module, path: str, value: Any) -> Any:
    """Put ``value`` (or remove the entry, for ``_MISSING``) at ``path`` and return what was
    there (``_MISSING`` if nothing): PyTorch's ``swap_tensor``."""
    if value is not _MISSING and value is not None and not isinstance(value, Tensor):
        raise TypeError(f"{value} is not an instance of torch.Tensor")
    m, name = _owner(module, path)
    d = m.__dict__
    for store in (d["_parameters"], d["_buffers"]):
        if name in store:
            orig = store[name]
            if value is _MISSING:
                del store[name]
            else:
                store[name] = value
            _context.bump()
            return orig
    orig = getattr(m, name, _MISSING)
    if orig is not _MISSING and orig is not None and not isinstance(orig, Tensor):
        raise TypeError(f"attribute `{name}`: {orig} is not an instance of torch.Tensor")
    if value is not _MISSING:
        setattr(m, name, value)
    elif orig is not _MISSING:
        delattr(m, name)
    return orig


@contextlib.contextmanager
def _reparametrize_module(module: Module, parameters_and_buffers: dict[str, Any],
                          tie_weights: bool = False, strict: bool = False) -> Iterator[None]:
    """The swap-in / call / swap-back of ``functional_call`` as a context manager."""
    given = _untie(module, parameters_and_buffers) if tie_weights else parameters_and_buffers
    if strict:
        valid = {n for n, _ in _named_tensors(module)}
        missing, unexpected = sorted(valid - set(given)), sorted(set(given) - valid)
        msgs = []
        if unexpected:
            msgs.append(f"Unexpected key(s): {', '.join(map(repr, unexpected))}.")
        if missing:
            msgs.append(f"Missing key(s): {', '.join(map(repr, missing))}.")
        if msgs:
            raise RuntimeError(f"Error(s) in reparametrizing for {type(module).__name__}:\n\t"
                               + "\n\t".join(msgs))
    ctx = _context.current()
    if ctx is not None:  # guard the modules on their own tensors, not the swapped-in ones
        for _, m in module.named_modules():
            ctx.note_module(m)
    originals: dict[str, Any] = {}
    try:
        for name, t in given.items():
            originals[name] = _swap(module, name, t)
        yield
    finally:
        current = {name: _swap(module, name, orig) for name, orig in originals.items()}
        # a module that rebinds its own tensor (``self.count = self.count + 1``) leaves the new
        # value in the caller's dict, as PyTorch does
        parameters_and_buffers.update({k: current[k] for k in parameters_and_buffers
                                       if k in current})


def _functional_call(module: Module, parameters_and_buffers: dict[str, Any],
                     args: Any = None, kwargs: dict[str, Any] | None = None, *,
                     tie_weights: bool = True, strict: bool = False) -> Any:
    if not isinstance(module, Module):
        raise TypeError(f"{module} is not an instance of torch.nn.Module")
    args = () if args is None else args if isinstance(args, tuple) else (args,)
    with _reparametrize_module(module, parameters_and_buffers, tie_weights=tie_weights,
                               strict=strict):
        return module(*args, **(kwargs or {}))


def functional_call(module: Module, parameters_and_buffers: dict[str, Any],
                    args: Any = None, kwargs: dict[str, Any] | None = None, *,
                    tie_weights: bool = True, strict: bool = False) -> Any:
    """``module(*args, **kwargs)`` with the named parameters and buffers replaced by the given
    tensors for the duration of the call (``args`` not a tuple: one argument). With
    ``tie_weights`` a value given for one name of a tied tensor is used for all its names;
    ``strict`` requires exactly the module's names. Deprecated in PyTorch in favour of
    ``torch.func.functional_call`` (same behaviour), and warns so."""
    warnings.warn("`torch.nn.utils.stateless.functional_call` is deprecated as of PyTorch 2.0 "
                  "and will be removed in a future version of PyTorch. Please use "
                  "`torch.func.functional_call` instead which is a drop-in replacement.",
                  FutureWarning, stacklevel=2)
    return _functional_call(module, parameters_and_buffers, args, kwargs,
                            tie_weights=tie_weights, strict=strict)
