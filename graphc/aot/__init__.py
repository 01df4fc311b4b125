"""Ahead-of-time builds: one compiled training step as a C library (``gc.aot.build``).

``build(fn, example_args, out_dir, name, target)`` writes

- ``NAME.h``: the C ABI, every function, argument, shape, dtype and ownership rule documented;
- ``NAME.o``: one position-independent relocatable object (the LLVM kernel, the initial state
  blob and the C wrapper combined with a partial link), to link into a program statically;
- ``libNAME.so``: the same as a shared library (``cc -shared ... -lm``);
- ``NAME.c``: the generated wrapper source, kept for reading and debugging.

What the library holds
----------------------
The step's *state* is everything the traced graph reads besides its arguments: parameters and
buffers, ``.grad`` tensors and optimizer state. ``NAME_create()`` allocates one copy of it,
initialised with the values the Python objects had when ``build`` ran. Those values are
embedded as a read-only data blob in a second LLVM object (bytes, so bit exact, and no 3 MB of C
array literals for the compiler to parse). Hyperparameters the trace made run-time inputs
(``lr``, Adam's betas, ...) are a struct ``NAME_hyper`` passed to every step, its defaults
being the values at build time; structural options (momentum on/off, nesterov, ...) are baked
in, as they are in the Python variant.

Presence (``.grad`` may be ``None``; optimizer state may not exist yet) is modelled by a
presence flag per tensor; buffers are always allocated, and an absent tensor's buffer holds
what the Python runtime feeds for a missing one (zeros for gradients, the optimizer's fill
value for its state), so results never depend on stale contents. The step built is the
variant for the presence *at build time*: if it read an incoming ``.grad`` (a step without
``zero_grad()``), the C step checks that presence and returns ``GRAPHC_ESTATE`` when it
differs, rather than silently computing something else. Optimizer-state flags are fed from
the presence flags, so "first step" logic (Adam's bias correction, SGD's momentum
initialisation) behaves as in Python.

The kernel commits every update only after all of its checks pass, and the wrapper updates
presence flags and counters only after a successful kernel call, so a step that returns an
error leaves the state exactly as it was.

Numerics: the kernel is the same LLVM IR the JIT compiles, for the same CPU and features, so a
library built for ``native`` reproduces the Python compiled step bit for bit on the build host.

Layout
------
``model`` (the state layout: :func:`describe`, :class:`AotModel`), ``target`` (CPU names and
the target machine), ``templates`` (the C files in ``c/``, read as package data, and their
``@MARKER@`` substitution), ``ctext`` (C spellings of names and values), ``checkpoint`` (the
checkpoint format: the C that writes its JSON document, and :func:`save_state`), ``csource``
(``NAME.h`` and ``NAME.c``), ``builder`` (objects, compiler and linker: :func:`build`). Each
imports only modules listed before it.
"""

from __future__ import annotations

from .builder import build
from .checkpoint import save_state
from .model import AOTError, AotModel, Arg, Hyper, StateTensor, describe  # noqa: F401
from .target import TargetError, check_target, llvm_catalog, target_machine  # noqa: F401

__all__ = ["build", "save_state", "AotModel", "StateTensor", "describe", "AOTError",
           "TargetError", "check_target", "llvm_catalog"]
