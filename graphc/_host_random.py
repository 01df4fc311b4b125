"""Python's and numpy's random functions refuse to run inside a traced function.

``x * np.random.uniform(0.9, 1.1)`` or ``random.random() < p`` inside a compiled step ran
once, at trace time: every call reused the number drawn then, where eager code draws a new
one each call — a data augmentation that silently stopped augmenting. graphc's own
generator (``gc.rand``, ``gc.randn``, ``gc.randint``, ``Tensor.uniform_``, dropout) is traced
as a draw at every call, so these calls raise instead, naming what to use. While any thread
traces, the module-level functions of ``random`` and ``numpy.random`` are replaced by
wrappers that raise on the tracing thread and call the original on any other; outside
traces they are the originals. Functions bound before (``from random import random``) and
methods of generator objects (``np.random.default_rng().uniform``) cannot be replaced and
still run once.
"""

from __future__ import annotations

import functools
import random
from typing import Any

import numpy as np

from . import _context

_PY = ("random", "uniform", "randint", "randrange", "choice", "choices", "shuffle", "sample",
       "gauss", "normalvariate", "lognormvariate", "expovariate", "vonmisesvariate",
       "gammavariate", "betavariate", "paretovariate", "weibullvariate", "triangular",
       "getrandbits", "randbytes", "binomialvariate", "seed")
_NP = ("rand", "randn", "randint", "random", "random_sample", "random_integers", "ranf",
       "sample", "uniform", "normal", "standard_normal", "choice", "permutation", "shuffle",
       "beta", "binomial", "bytes", "chisquare", "dirichlet", "exponential", "f", "gamma",
       "geometric", "gumbel", "hypergeometric", "laplace", "logistic", "lognormal",
       "logseries", "multinomial", "multivariate_normal", "negative_binomial",
       "noncentral_chisquare", "noncentral_f", "pareto", "poisson", "power", "rayleigh",
       "standard_cauchy", "standard_exponential", "standard_gamma", "standard_t",
       "triangular", "vonmises", "wald", "weibull", "zipf", "seed", "set_state")
_SAVED: list[tuple[Any, str, Any]] = []


def _refusing(module_name: str, name: str, fn: Any) -> Any:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _context._local.ctx is not None:
            raise NotImplementedError(
                f"{module_name}.{name}() inside a compiled function runs once, when the "
                "function is traced, so every call would reuse what it drew then (eager code "
                "draws anew each call): draw with graphc's generator instead (gc.rand, "
                "gc.randn, gc.randint, gc.randperm, Tensor.uniform_, ...; traced as a draw "
                "at every call, seeded by gc.manual_seed), or draw outside and pass the "
                "value as an argument")
        return fn(*args, **kwargs)
    return wrapper


def _switch(tracing: bool) -> None:
    if tracing:
        for module, module_name, names in ((random, "random", _PY),
                                           (np.random, "numpy.random", _NP)):
            for name in names:
                fn = module.__dict__.get(name)
                if callable(fn):
                    _SAVED.append((module, name, fn))
                    setattr(module, name, _refusing(module_name, name, fn))
    else:
        while _SAVED:
            module, name, fn = _SAVED.pop()
            setattr(module, name, fn)


_context.TRACING_HOOKS.append(_switch)
