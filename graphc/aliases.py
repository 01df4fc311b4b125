"""PyTorch's second names for ops graphc has, and the ``torch.<name>(input, ...)`` forms of
tensor methods: one table each, read by the ``Tensor`` methods (``graphc.tensor_ops``) and
the ``gc`` namespace (``graphc._core``).

Why tables and not one definition per name: an alias must mean exactly what its op means
(the same function object, in place and out of place, eagerly and traced), and a functional
form exactly what the method means; written out one by one, each copy could drift from its
original. This module imports nothing, so both layers can read it.
"""

from __future__ import annotations

# alias -> the graphc name it stands for (``Tensor.<alias>``, ``Tensor.<alias>_`` where the
# op has an in-place form, and ``gc.<alias>``), as in PyTorch's ``torch/_torch_docs.py``
ALIASES: dict[str, str] = {
    "absolute": "abs",
    "arccos": "acos",
    "arcsin": "asin",
    "arctan": "atan",
    "arccosh": "acosh",
    "arcsinh": "asinh",
    "arctanh": "atanh",
    "arctan2": "atan2",
    "negative": "neg",
    "multiply": "mul",
    "divide": "div",
    "subtract": "sub",
    "greater": "gt",
    "greater_equal": "ge",
    "less": "lt",
    "less_equal": "le",
    "not_equal": "ne",
    "fix": "trunc",
    "clip": "clamp",
    "true_divide": "div",
}

# ``gc.<name>(input, *args, **kwargs)`` is ``input.<name>(*args, **kwargs)`` for these
# methods. True: PyTorch also takes a Python number as ``input`` (its Scalar overloads:
# ``torch.pow(2, t)``, ``torch.sub(1, t)``), computed with the number as the left operand;
# False: ``input`` must be a tensor, as PyTorch requires.
METHOD_FORMS: dict[str, bool] = {
    "add": True, "sub": True, "mul": True, "div": True, "pow": True,
    "neg": False, "rsqrt": False, "reciprocal": False, "erf": False, "addcmul": False,
    "addcdiv": False, "logsumexp": False, "numel": False, "reshape": False,
    "transpose": False, "permute": False, "squeeze": False, "unsqueeze": False,
    "flatten": False, "clone": False, "detach": False, "ravel": False,
    "broadcast_to": False, "is_floating_point": False, "is_complex": False,
    "is_nonzero": False,
}
