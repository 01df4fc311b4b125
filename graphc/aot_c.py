"""C source generation for ahead-of-time builds (``NAME.h`` and the wrapper ``NAME.c``).

The wrapper owns everything the LLVM kernel does not: the state (one aligned buffer per
tensor, presence flags, the scratch arena), the pointer table the kernel reads
(``[syms, scratch, scratch_info, err, inputs..., outputs..., updates...]``, see
``codegen/lower.py``), argument checks, and checkpoints. It is plain C99 plus POSIX
(``mkstemp``, ``fsync``, ``rename``) so any C compiler builds it.

Checkpoints are ``gc.load``-readable archives (``graphc/serialization.py``): an uncompressed
zip (stored entries, CRC-32) of ``.npy`` files and a ``__graphc__`` JSON document. The C writer
names entries after the tensors (``model.0.weight.npy``), which the format allows (the JSON
refers to entries by name), so the C reader finds tensors without parsing JSON. The document's
root is a dict::

    {"format": "graphc.aot.state", "version": 1, "name": NAME, "steps": <int>,
     "tensors": {tensor name: array or None (absent)},
     "modules": {module variable: {state_dict key: array}},
     "optimizers": {optimizer variable: optimizer.state_dict()-shaped dict},
     "hyper": {hyperparameter label: float (the values of the last step)}}

so ``model.load_state_dict(ckpt["modules"]["model"])`` and
``opt.load_state_dict(ckpt["optimizers"]["opt"])`` resume training in Python.
"""

from __future__ import annotations

import json
import math
from typing import Any

import sympy

from .aot import AotModel
from .ir import dtypes as dt
from .serialization import _encode

_C_TYPE = {dt.float32: "float", dt.float64: "double", dt.int64: "int64_t",
           dt.int32: "int32_t", dt.bool_: "uint8_t"}
_DESCR = {dt.float32: "<f4", dt.float64: "<f8", dt.int64: "<i8", dt.int32: "<i4",
          dt.bool_: "|b1"}
_ENUM = {dt.float32: "GRAPHC_FLOAT32", dt.float64: "GRAPHC_FLOAT64", dt.int64: "GRAPHC_INT64",
         dt.int32: "GRAPHC_INT32", dt.bool_: "GRAPHC_BOOL"}
_KIND = {"param": "GRAPHC_PARAM", "buffer": "GRAPHC_BUFFER", "grad": "GRAPHC_GRAD",
         "optim": "GRAPHC_OPTIM"}
_C_WORDS = set("""auto break case char const continue default do double else enum extern float
for goto if inline int long register restrict return short signed sizeof static struct switch
typedef union unsigned void volatile while bool class new delete template this operator
private public protected namespace virtual friend using typename state hyper""".split())


def cstr(s: str) -> str:
    """A C string literal for ``s`` (octal escapes: never merge with following digits)."""
    out = []
    for b in s.encode():
        c = chr(b)
        if c in '"\\?':
            out.append("\\" + c)
        elif 32 <= b < 127:
            out.append(c)
        else:
            out.append(f"\\{b:03o}")
    return '"' + "".join(out) + '"'


class Names:
    """C names for the step's arguments, batch sizes and outputs (no clashes, no keywords)."""

    def __init__(self, m: AotModel) -> None:
        taken: set[str] = set()

        def pick(base: str) -> str:
            s = "".join(c if c.isalnum() else "_" for c in base) or "arg"
            if s[0].isdigit() or s in _C_WORDS or s.startswith("batch") or s.startswith("out"):
                s = "arg_" + s
            k, b = 2, s
            while s in taken:
                s, k = f"{b}_{k}", k + 1
            taken.add(s)
            return s

        self.args = [pick(a.name) for a in m.args]
        if len(m.symbols) == 1:
            self.syms = {m.symbols[0]: "batch"}
        else:
            self.syms = {s: f"batch_{s.name}" for s in m.symbols}
        self.outs = ["out"] if len(m.outputs) == 1 else [f"out{j}" for j in range(len(m.outputs))]

    def dim(self, d: Any) -> str:
        """C expression (int64_t) for one dimension."""
        if isinstance(d, int):
            return f"(int64_t){d}"
        e = sympy.sympify(d)
        sub = {s: sympy.Symbol(v, integer=True) for s, v in self.syms.items()}
        return f"(int64_t)({sympy.ccode(e.subs(sub))})"

    def shape_doc(self, shape: tuple) -> str:
        if not shape:
            return "[] (a scalar: one element)"
        return "".join(f"[{d if isinstance(d, int) else self.sym_doc(d)}]" for d in shape)

    def sym_doc(self, d: Any) -> str:
        e = sympy.sympify(d)
        return str(e.subs({s: sympy.Symbol(v) for s, v in self.syms.items()}))


def _numel_c(names: Names, shape: tuple) -> str:
    return " * ".join(names.dim(d) for d in shape) if shape else "(int64_t)1"


# ---------------------------------------------------------------------------------------
# header
# ---------------------------------------------------------------------------------------

def _step_params(m: AotModel, names: Names) -> list[tuple[str, str]]:
    """(C declaration, doc) for each parameter of NAME_step after the state."""
    ps = []
    for a, cn in zip(m.args, names.args):
        ps.append((f"const {_C_TYPE[a.dtype]}* {cn}",
                   f"argument {a.name!r}: {a.dtype.name}{names.shape_doc(a.shape)}, C order, "
                   "read only, borrowed for the call"))
    for s in m.symbols:
        ps.append((f"int64_t {names.syms[s]}",
                   f"the size of symbolic dimension {s.name} (the batch size), "
                   "1..GRAPHC_MAX_BATCH"))
    ps.append((f"const {m.name}_hyper* hyper",
               f"run-time hyperparameters; NULL means {m.name}_default_hyper()"))
    for (dtype, shape), cn in zip(m.outputs, names.outs):
        ps.append((f"{_C_TYPE[dtype]}* {cn}",
                   f"result: {dtype.name}{names.shape_doc(shape)}, written only on success; "
                   "caller-owned; NULL discards it"))
    return ps


def generate_header(m: AotModel) -> str:
    n = m.name
    names = Names(m)
    N = n.upper()
    max_rank = max([len(t.shape) for t in m.tensors] + [1])
    arg_doc = ", ".join(f"{a.name}: {a.dtype.name}{names.shape_doc(a.shape)}" for a in m.args)
    hyper_fields = "".join(f"    double {h.field};  /* {h.label}, default {h.default!r} */\n"
                           for h in m.hypers) or \
        "    char unused_;  /* no run-time hyperparameters */\n"
    tensor_doc = "".join(
        f" *   {i:3d}  {t.kind:6s} {t.dtype.name:7s} {list(t.shape)!s:18s} {t.name}"
        f"{'' if t.present else '  (absent at build time)'}\n" for i, t in enumerate(m.tensors))
    baked = "".join(f" *   {what} = {val!r}\n" for what, val in m.baked) or " *   (none)\n"
    guards = "".join(f" *   {m.tensors[t].name} must be {'present' if p else 'absent'}\n"
                     for t, p in m.presence_guards) or " *   (none)\n"
    params = _step_params(m, names)
    step_decl = f"int {n}_step({n}_state* state,\n" + ",\n".join(
        f"        {d}" for d, _ in params) + ");"
    param_doc = "".join(f" *   {d.split()[-1].lstrip('*')}: {doc}.\n" for d, doc in params)
    return f"""/* {n}.h: a training step compiled ahead of time by graphc (generated; do not edit).
 *
 * The Python step was {m.step_name or n}({arg_doc}).
 * Target: {m.target} (LLVM cpu {m.cpu!r}). The kernel needs that CPU level or newer.
 * Link: {n}.o (position independent, link statically) or lib{n}.so, plus -lm.
 *
 * Model. A {n}_state holds everything the step reads and writes besides its arguments:
 * parameters, buffers, gradients and optimizer state, initialised from the values they had
 * when the library was built. Every tensor is a C-order array with a fixed shape:
 *
 *   idx  kind   dtype   shape              name
{tensor_doc} *
 * Gradients and optimizer state also carry a presence flag (PyTorch's ".grad is None" and
 * "no optimizer state yet"). Their buffers always exist; a successful step marks what it
 * wrote as present. The step's structure was fixed at build time by these options:
{baked} * and it requires this gradient presence (else GRAPHC_ESTATE):
{guards} *
 * Errors. Every function that can fail returns GRAPHC_OK (0) or an error code below. A step
 * that fails leaves the state exactly as it was (the kernel commits its updates only after all
 * of its checks pass).
 *
 * Ownership. Pointers passed in are borrowed for the duration of the call; a state is owned by
 * the caller from {n}_create() to {n}_destroy(). {n}_param_data() pointers are owned by the
 * state and valid until {n}_destroy().
 *
 * Threads. All functions are reentrant: distinct states may be used from different threads at
 * the same time. One state must not be used by two threads at once (no locking inside). The
 * metadata functions ({n}_num_tensors, {n}_tensor, {n}_find, {n}_default_hyper,
 * {n}_strerror) are always thread safe.
 */
#ifndef {N}_H_INCLUDED
#define {N}_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {{
#endif

#ifndef GRAPHC_AOT_COMMON
#define GRAPHC_AOT_COMMON
/* return codes (shared by every graphc AOT library) */
#define GRAPHC_OK 0
#define GRAPHC_EBATCH 1   /* a batch size < 1 or > GRAPHC_MAX_BATCH */
#define GRAPHC_EINDEX 2   /* a class index / target out of range; see NAME_last_error */
#define GRAPHC_ENOMEM 3   /* an allocation failed */
#define GRAPHC_EINVAL 4   /* NULL pointer, unknown tensor name or wrong element count */
#define GRAPHC_ESTATE 5   /* gradient presence differs from the one the step was built for */
#define GRAPHC_EIO 6      /* a file could not be read or written (errno says why) */
#define GRAPHC_EFORMAT 7  /* a checkpoint that does not fit this step's state */
#define GRAPHC_EINTERNAL 8 /* a failure the step does not expect (please report it) */
#define GRAPHC_ENONFINITE 9 /* check_finite: the loss or a gradient holds NaN or Inf; the
                            * update was not applied; see NAME_last_error and NAME_checked */
#define GRAPHC_EBOUNDS 10   /* debug builds: a load or store outside its buffer was stopped */
#define GRAPHC_MAX_BATCH ((int64_t)2147483647)
/* element types (the numpy names) */
#define GRAPHC_FLOAT32 0  /* float */
#define GRAPHC_FLOAT64 1  /* double */
#define GRAPHC_INT64 2    /* int64_t */
#define GRAPHC_INT32 3    /* int32_t */
#define GRAPHC_BOOL 4     /* uint8_t, 0 or 1 */
/* tensor kinds */
#define GRAPHC_PARAM 0
#define GRAPHC_BUFFER 1
#define GRAPHC_GRAD 2
#define GRAPHC_OPTIM 3
#endif

#define {N}_NUM_TENSORS {len(m.tensors)}
#define {N}_NUM_HYPER {len(m.hypers)}
#define {N}_MAX_RANK {max_rank}

/* Opaque training state (see the top of this file). */
typedef struct {n}_state {n}_state;

/* Run-time hyperparameters, one double per optimizer setting the step reads at run time. */
typedef struct {n}_hyper {{
{hyper_fields}}} {n}_hyper;

/* Static description of one state tensor. */
typedef struct {n}_tensor_info {{
    const char* name;   /* e.g. "model.0.weight"; unique */
    int kind;           /* GRAPHC_PARAM, GRAPHC_BUFFER, GRAPHC_GRAD or GRAPHC_OPTIM */
    int dtype;          /* GRAPHC_FLOAT32, ... */
    int ndim;           /* 0 for a scalar */
    int64_t shape[{N}_MAX_RANK];  /* the first ndim entries are used */
    size_t numel;       /* number of elements (1 for a scalar) */
    size_t nbytes;      /* numel * element size */
}} {n}_tensor_info;

/* The hyperparameter values the optimizer had when the library was built. */
{n}_hyper {n}_default_hyper(void);

/* A new state with the build-time values; NULL if out of memory. Free with {n}_destroy. */
{n}_state* {n}_create(void);

/* Frees the state and everything it owns. NULL is allowed. */
void {n}_destroy({n}_state* state);

/* Restores the build-time values and presence flags and zeroes the step counter. */
void {n}_reset({n}_state* state);

/* One training step: forward, backward and optimizer update, as the Python step did.
{param_doc} * Returns GRAPHC_OK, GRAPHC_EBATCH, GRAPHC_EINDEX, GRAPHC_ENOMEM (the scratch arena,
 * owned by the state, grows on demand), GRAPHC_EINVAL (a NULL state or argument) or
 * GRAPHC_ESTATE; on any error nothing in the state changed.
 */
{step_decl}

/* Number of state tensors, and their static descriptions (i < {n}_num_tensors()). */
size_t {n}_num_tensors(void);
const {n}_tensor_info* {n}_tensor(size_t i);

/* Index of the tensor called name, or -1. */
int {n}_find(const char* name);

/* Copies tensor `name` into out, which holds n elements of its dtype; n must equal its numel
 * (else GRAPHC_EINVAL). An absent gradient reads as zeros, an absent optimizer state as the
 * value Python starts it from. */
int {n}_get_param(const {n}_state* state, const char* name, void* out, size_t n);

/* Overwrites tensor `name` from in (n elements of its dtype) and marks it present. */
int {n}_set_param({n}_state* state, const char* name, const void* in, size_t n);

/* The state's own buffer of tensor `name` (NULL if unknown): read or write in place between
 * steps; owned by the state. */
void* {n}_param_data({n}_state* state, const char* name);

/* 1 if tensor `name` is present, 0 if absent, -1 if unknown. Parameters are always present. */
int {n}_is_present(const {n}_state* state, const char* name);

/* Marks a gradient / optimizer state present (1) or absent (0), e.g. zero_grad(set_to_none).
 * Parameters and buffers cannot be made absent (GRAPHC_EINVAL). */
int {n}_set_present({n}_state* state, const char* name, int present);

/* Number of successful steps since create/reset (saved in checkpoints). */
int64_t {n}_steps(const {n}_state* state);

/* After GRAPHC_EINDEX: info = {{error code, node index, flat position, bad value}}.
 * After GRAPHC_ENONFINITE: info = {{error code, k, 0, 0}}: the k-th checked tensor
 * ({n}_checked(k) names it) was the first, in execution order, holding NaN or Inf. */
void {n}_last_error(const {n}_state* state, int64_t info[4]);

/* The name of the k-th tensor a check_finite step checks (NULL when k is out of range). */
const char* {n}_checked(int64_t k);

/* Seeds the random stream of random ops (dropout) in this state (SplitMix64; not the same
 * stream as Python's). Steps without random ops ignore it. */
void {n}_set_seed({n}_state* state, uint64_t seed);

/* Writes a checkpoint gc.load() reads (an uncompressed .npz; see graphc/aot_c.py): every
 * present tensor, the step count and the last hyperparameters. Atomic: written to a
 * temporary file in the same directory, fsync'ed, then renamed over path. GRAPHC_EIO on
 * failure (errno is kept). */
int {n}_save(const {n}_state* state, const char* path);

/* Reads a checkpoint written by {n}_save (or graphc.aot.save_state). Every parameter and
 * buffer must be in it with its dtype and shape; gradients / optimizer states not in it become
 * absent. All or nothing: on GRAPHC_EIO / GRAPHC_EFORMAT / GRAPHC_ENOMEM the state is unchanged. */
int {n}_load({n}_state* state, const char* path);

/* A static English description of a return code. */
const char* {n}_strerror(int code);

#ifdef __cplusplus
}}
#endif
#endif /* {N}_H_INCLUDED */
"""


# ---------------------------------------------------------------------------------------
# checkpoint document (JSON built by generated C code)
# ---------------------------------------------------------------------------------------

class _Doc:
    """Emits C statements that append the checkpoint's JSON document to a buffer ``jb``."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 0
        self._lit: list[str] = []

    def lit(self, text: str) -> None:
        self._lit.append(text)

    def flush(self) -> None:
        if self._lit:
            text = cstr("".join(self._lit))
            self.lines.append("    " * (self.depth + 1) + f"jb_lit(jb, {text});")
            self._lit = []

    def stmt(self, code: str) -> None:
        self.flush()
        self.lines.append("    " * (self.depth + 1) + code)

    def const(self, value: Any) -> None:
        self.lit(json.dumps(_encode(value, {}, "checkpoint"), allow_nan=False))

    def array(self, t: int) -> None:
        self.stmt(f"jb_array(jb, s, {t});")

    def hyper(self, k: int) -> None:
        self.stmt(f"jb_double(jb, s->last_hyper_v[{k}]);")

    def dict_(self, entries: list[tuple[Any, Any, str | None]]) -> None:
        """entries: (key, emit-callable, C condition or None); conditional ones may vanish."""
        self.lit('{"$dict": [')
        if all(c is None for _, _, c in entries):
            for i, (k, emit, _) in enumerate(entries):
                self.lit((", " if i else "") + "[")
                self.const(k)
                self.lit(", ")
                emit()
                self.lit("]")
        else:
            self.stmt("{ int first = 1;")
            self.depth += 1
            for k, emit, cond in entries:
                if cond is not None:
                    self.stmt(f"if ({cond}) {{")
                    self.depth += 1
                self.stmt('jb_lit(jb, first ? "[" : ", ["); first = 0;')
                self.const(k)
                self.lit(", ")
                emit()
                self.lit("]")
                self.flush()
                if cond is not None:
                    self.depth -= 1
                    self.stmt("}")
            self.stmt("(void)first; }")
            self.depth -= 1
        self.lit("]}")


def _doc_code(m: AotModel) -> str:
    d = _Doc()
    ti = {id(t): i for i, t in enumerate(m.tensors)}
    modules: dict[str, list[tuple[str, int]]] = {}
    for i, t in enumerate(m.tensors):
        if t.module_key is not None:
            modules.setdefault(t.module_key[0], []).append((t.module_key[1], i))
    hyper_at = {h.where: k for k, h in enumerate(m.hypers)}

    def tensors() -> None:
        d.dict_([(t.name, (lambda i=i: d.array(i)), None) for i, t in enumerate(m.tensors)])

    def mods() -> None:
        d.dict_([(var, (lambda ents=ents: d.dict_(
            [(key, (lambda i=i: d.array(i)), None) for key, i in ents])), None)
            for var, ents in modules.items()])

    def group_value(gid: int, key: str, value: Any) -> None:
        if (gid, key, None) in hyper_at:
            d.hyper(hyper_at[(gid, key, None)])
        elif isinstance(value, tuple) and any((gid, key, j) in hyper_at
                                              for j in range(len(value))):
            d.lit('{"$tuple": [')
            for j, v in enumerate(value):
                d.lit(", " if j else "")
                if (gid, key, j) in hyper_at:
                    d.hyper(hyper_at[(gid, key, j)])
                else:
                    d.const(v)
            d.lit("]}")
        else:
            d.const(value)

    def optimizer(var: str, groups: list[dict[str, Any]], gids: list[int]) -> None:
        per_param: dict[int, list[tuple[str, int]]] = {}
        for t in m.tensors:
            if t.optim_key is not None and t.optim_key[0] == var:
                per_param.setdefault(t.optim_key[1], []).append((t.optim_key[2], ti[id(t)]))

        def state() -> None:
            ents = []
            for pidx, keys in sorted(per_param.items()):
                cond = " || ".join(f"s->present[{i}]" for _, i in keys)
                ents.append((pidx, (lambda keys=keys: d.dict_(
                    [(k, (lambda i=i: d.array(i)), f"s->present[{i}]") for k, i in keys])), cond))
            d.dict_(ents)

        def param_groups() -> None:
            d.lit("[")
            for gi, (grp, gid) in enumerate(zip(groups, gids)):
                d.lit(", " if gi else "")
                d.dict_([(k, (lambda gid=gid, k=k, v=v: group_value(gid, k, v)), None)
                         for k, v in grp.items()])
            d.lit("]")

        d.dict_([("state", state, None), ("param_groups", param_groups, None)])

    def optims() -> None:
        d.dict_([(var, (lambda var=var, gr=gr, gids=gids: optimizer(var, gr, gids)), None)
                 for var, gr, gids in m.optimizers])

    def hyper() -> None:
        d.dict_([(h.label, (lambda k=k: d.hyper(k)), None) for k, h in enumerate(m.hypers)])

    d.lit('{"format": "graphc.checkpoint", "version": 1, "root": ')
    d.dict_([
        ("format", lambda: d.const("graphc.aot.state"), None),
        ("version", lambda: d.const(1), None),
        ("name", lambda: d.const(m.name), None),
        ("steps", lambda: d.lit('{"$scalar": "__aot_steps__"}'), None),
        ("tensors", tensors, None),
        ("modules", mods, None),
        ("optimizers", optims, None),
        ("hyper", hyper, None),
    ])
    d.lit("}")
    d.flush()
    return "\n".join(d.lines)


# ---------------------------------------------------------------------------------------
# source
# ---------------------------------------------------------------------------------------

def _c_double(v: float) -> str:
    """A C expression for a double, exactly (repr round-trips; non-finite spelled out)."""
    if math.isnan(v):
        return "(0.0 / 0.0)"
    if math.isinf(v):
        return "(1.0 / 0.0)" if v > 0 else "(-1.0 / 0.0)"
    return repr(float(v))


def _crc_table() -> str:
    vals = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (0xEDB88320 ^ (c >> 1)) if c & 1 else (c >> 1)
        vals.append(f"0x{c:08x}u")
    return ",\n    ".join(", ".join(vals[i:i + 6]) for i in range(0, 256, 6))


def _npy_header(t: Any) -> str:
    """The .npy v1.0 header numpy writes for this tensor (padded to 64 bytes)."""
    shape = "(" + "".join(f"{d}, " for d in t.shape)[:-2] + ("," if len(t.shape) == 1 else "")
    shape += ")"
    d = f"{{'descr': '{_DESCR[t.dtype]}', 'fortran_order': False, 'shape': {shape}, }}"
    total = 10 + len(d) + 1
    d += " " * (-total % 64) + "\n"
    return d


def generate_source(m: AotModel, offsets: list[int]) -> str:  # noqa: C901
    n = m.name
    names = Names(m)
    N = n.upper()
    nt = len(m.tensors)
    nh = len(m.hypers)
    n_in = len(m.inputs)
    n_out = len(m.outputs)
    table = 4 + n_in + n_out + len(m.updates)
    nsym = len(m.kernel_symbols)
    n_flags = sum(1 for k, _ in m.inputs if k == "flag")
    L: list[str] = []
    w = L.append

    w(f"/* {n}.c: C wrapper of the ahead-of-time compiled step {n} (generated by graphc.aot). */")
    w("#define _POSIX_C_SOURCE 200809L")
    w(f'#include "{n}.h"')
    w("#include <errno.h>\n#include <fcntl.h>\n#include <stdio.h>\n#include <stdlib.h>")
    w("#include <string.h>\n#include <sys/stat.h>\n#include <unistd.h>\n")
    w(f"extern int32_t {n}_kernel(void** table);")
    w(f"extern const unsigned char {n}_init_blob[];\n")
    w(f"#define NT {max(nt, 1)}\n#define NH {max(nh, 1)}\n#define NTABLE {table}")
    w(f"#define NOUT {max(n_out, 1)}\n#define NFLAGS {max(n_flags, 1)}")
    w(f"#define NARG {max(len(m.args), 1)}")
    w(f"#define NSEEDS {max(m.n_seeds, 1)}\n#define NSYM {max(nsym, 1)}\n")
    # tensor metadata
    w(f"static const {n}_tensor_info TENSORS[NT] = {{")
    for t in m.tensors:
        shape = ", ".join(str(d) for d in t.shape) or "0"
        w(f"    {{{cstr(t.name)}, {_KIND[t.kind]}, {_ENUM[t.dtype]}, {len(t.shape)}, "
          f"{{{shape}}}, {t.numel}u, {t.nbytes}u}},")
    if not m.tensors:
        w('    {"", 0, 0, 0, {0}, 0u, 0u},')
    w("};")
    w(f"static const size_t BLOB_OFFSET[NT] = {{{', '.join(map(str, offsets)) or '0'}}};")
    w(f"static const unsigned char INIT_PRESENT[NT] = "
      f"{{{', '.join('1' if t.present else '0' for t in m.tensors) or '0'}}};")
    w("static const double FILL[NT] = {" +
      (", ".join(_c_double(t.fill) for t in m.tensors) or "0.0") + "};")
    w("static const char* const NPY_HEADER[NT] = {")
    for t in m.tensors:
        w(f"    {cstr(_npy_header(t))},")
    if not m.tensors:
        w('    ""')
    w("};")
    w("static const char* const HYPER_LABEL[NH] = {" +
      (", ".join(cstr(h.label) for h in m.hypers) or '""') + "};")
    w(f"static const uint32_t CRC_TABLE[256] = {{\n    {_crc_table()}\n}};\n")

    w(f"""struct {n}_state {{
    void* table[NTABLE];
    int64_t syms[NSYM];
    int64_t info[2];          /* scratch capacity, bytes needed (kernel protocol) */
    int64_t err[4];           /* kernel error details */
    int64_t last_err[4];
    unsigned char* scratch_raw;
    int64_t scratch_cap;
    void* data[NT];           /* 64-byte aligned views into raw[] */
    void* raw[NT];
    unsigned char present[NT];
    uint8_t flags[NFLAGS];    /* optimizer-state presence fed to the kernel */
    double hyper_v[NH];       /* hyperparameters fed to the kernel */
    double last_hyper_v[NH];  /* of the last successful step (checkpoints) */
    int64_t seeds[NSEEDS];
    uint64_t rng;
    int64_t steps;
    void* out_stage[NOUT];    /* staging for results the caller discards */
    size_t out_cap[NOUT];
    void* in_stage[NARG];     /* private copies of arguments that overlap a state tensor */
    size_t in_cap[NARG];
}};

static void* aligned_alloc64(size_t n, void** raw) {{
    unsigned char* p = (unsigned char*)malloc(n + 64);
    *raw = p;
    if (!p) return NULL;
    return p + ((64 - ((uintptr_t)p & 63)) & 63);
}}
""")
    # default hyper
    w(f"{n}_hyper {n}_default_hyper(void) {{")
    w(f"    {n}_hyper h;")
    w("    memset(&h, 0, sizeof h);")
    for h in m.hypers:
        w(f"    h.{h.field} = {_c_double(h.default)};")
    w("    return h;\n}\n")
    w(f"""static void hyper_to_array(const {n}_hyper* h, double* v) {{""")
    for k, h in enumerate(m.hypers):
        w(f"    v[{k}] = h->{h.field};")
    w("    (void)h; (void)v;\n}\n")

    # table setup
    w(f"static void bind_fixed({n}_state* s) {{")
    w("    s->table[0] = s->syms;\n    s->table[2] = s->info;\n    s->table[3] = s->err;")
    fi = 0
    for i, (kind, idx) in enumerate(m.inputs):
        slot = 4 + i
        if kind == "tensor":
            w(f"    s->table[{slot}] = s->data[{idx}];")
        elif kind == "flag":
            w(f"    s->table[{slot}] = &s->flags[{fi}];")
            fi += 1
        elif kind == "hyper":
            w(f"    s->table[{slot}] = &s->hyper_v[{idx}];")
        elif kind == "seed":
            w(f"    s->table[{slot}] = &s->seeds[{idx}];")
    base = 4 + n_in + n_out
    for j, t in enumerate(m.updates):
        w(f"    s->table[{base + j}] = s->data[{t}];")
    w("}\n")

    w(f"""void {n}_reset({n}_state* s) {{
    size_t i;
    {n}_hyper h = {n}_default_hyper();
    if (!s) return;
    for (i = 0; i < {nt}; i++) {{
        memcpy(s->data[i], {n}_init_blob + BLOB_OFFSET[i], TENSORS[i].nbytes);
        s->present[i] = INIT_PRESENT[i];
    }}
    hyper_to_array(&h, s->last_hyper_v);
    s->steps = 0;
    s->rng = 0x9E3779B97F4A7C15ull;
    memset(s->last_err, 0, sizeof s->last_err);
}}

{n}_state* {n}_create(void) {{
    size_t i;
    {n}_state* s = ({n}_state*)calloc(1, sizeof *s);
    if (!s) return NULL;
    for (i = 0; i < {nt}; i++) {{
        s->data[i] = aligned_alloc64(TENSORS[i].nbytes, &s->raw[i]);
        if (!s->data[i]) {{ {n}_destroy(s); return NULL; }}
    }}
    bind_fixed(s);
    {n}_reset(s);
    return s;
}}

void {n}_destroy({n}_state* s) {{
    size_t i;
    if (!s) return;
    for (i = 0; i < NT; i++) free(s->raw[i]);
    for (i = 0; i < NOUT; i++) free(s->out_stage[i]);
    for (i = 0; i < NARG; i++) free(s->in_stage[i]);
    free(s->scratch_raw);
    free(s);
}}

/* Grow the scratch arena to at least `need` bytes (contents need not survive: the kernel
 * checks the capacity before writing anything). */
static int grow_scratch({n}_state* s, int64_t need) {{
    void* raw;
    unsigned char* p;
    size_t cap;
    if (need <= s->scratch_cap) return GRAPHC_OK;
    if (need < 0 || (uint64_t)need > (uint64_t)SIZE_MAX - 4160u) return GRAPHC_ENOMEM;
    cap = ((size_t)need + 4095u) & ~(size_t)4095u;
    p = (unsigned char*)aligned_alloc64(cap, &raw);
    if (!p) return GRAPHC_ENOMEM;
    free(s->scratch_raw);
    s->scratch_raw = (unsigned char*)raw;
    s->table[1] = p;
    s->scratch_cap = (int64_t)cap;
    s->info[0] = (int64_t)cap;
    return GRAPHC_OK;
}}

static int stage_output({n}_state* s, int j, size_t nbytes) {{
    if (s->out_cap[j] < nbytes || !s->out_stage[j]) {{
        void* p = malloc(nbytes ? nbytes : 1);
        if (!p) return GRAPHC_ENOMEM;
        free(s->out_stage[j]);
        s->out_stage[j] = p;
        s->out_cap[j] = nbytes;
    }}
    return GRAPHC_OK;
}}

/* 1 if [p, p + nbytes) shares a byte with a state tensor. Arguments that do are copied
 * first (the kernel writes state in place while it may still read its arguments, and its
 * buffer arguments are noalias); results that do are refused (GRAPHC_EINVAL). */
static int overlaps_state(const {n}_state* s, const void* p, size_t nbytes) {{
    size_t i;
    uintptr_t lo = (uintptr_t)p, hi = lo + nbytes;
    if (!nbytes) return 0;
    for (i = 0; i < NT && i < {nt}; i++) {{
        uintptr_t a = (uintptr_t)s->data[i], b = a + TENSORS[i].nbytes;
        if (lo < b && a < hi) return 1;
    }}
    return 0;
}}

static int stage_input({n}_state* s, int k, const void* p, size_t nbytes) {{
    if (s->in_cap[k] < nbytes || !s->in_stage[k]) {{
        void* q = malloc(nbytes ? nbytes : 1);
        if (!q) return GRAPHC_ENOMEM;
        free(s->in_stage[k]);
        s->in_stage[k] = q;
        s->in_cap[k] = nbytes;
    }}
    memcpy(s->in_stage[k], p, nbytes);
    return GRAPHC_OK;
}}

/* An absent gradient / optimizer state holds what Python feeds for a missing one. */
static void make_absent({n}_state* s, size_t i) {{
    size_t k, n = TENSORS[i].numel;
    s->present[i] = 0;
    switch (TENSORS[i].dtype) {{
    case GRAPHC_FLOAT32:
        for (k = 0; k < n; k++) ((float*)s->data[i])[k] = (float)FILL[i];
        break;
    case GRAPHC_FLOAT64:
        for (k = 0; k < n; k++) ((double*)s->data[i])[k] = FILL[i];
        break;
    case GRAPHC_INT64:
        for (k = 0; k < n; k++) ((int64_t*)s->data[i])[k] = (int64_t)FILL[i];
        break;
    case GRAPHC_INT32:
        for (k = 0; k < n; k++) ((int32_t*)s->data[i])[k] = (int32_t)FILL[i];
        break;
    default:
        memset(s->data[i], FILL[i] != 0.0, n);
        break;
    }}
}}

static uint64_t splitmix64(uint64_t* x) {{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}}

void {n}_set_seed({n}_state* s, uint64_t seed) {{
    if (s) s->rng = seed;
}}
""")
    # step
    params = _step_params(m, names)
    w(f"int {n}_step({n}_state* s,\n" + ",\n".join(f"        {d}" for d, _ in params) + ") {")
    w(f"    int rc, tries;\n    size_t nb;\n    uint64_t rng;\n    {n}_hyper dflt;")
    w("    if (!s) return GRAPHC_EINVAL;")
    for s_ in m.symbols:
        v = names.syms[s_]
        w(f"    if ({v} < 1 || {v} > GRAPHC_MAX_BATCH) return GRAPHC_EBATCH;")
    for cn in names.args:
        w(f"    if (!{cn}) return GRAPHC_EINVAL;")
    for t, p in m.presence_guards:
        w(f"    if (s->present[{t}] != {1 if p else 0}) return GRAPHC_ESTATE;")
    w(f"    if (!hyper) {{ dflt = {n}_default_hyper(); hyper = &dflt; }}")
    for j, sym in enumerate(m.kernel_symbols):
        if sym not in names.syms:
            raise ValueError(f"kernel symbol {sym} is not a batch size of the arguments")
        w(f"    s->syms[{j}] = {names.syms[sym]};")
    w("    hyper_to_array(hyper, s->hyper_v);")
    fi = 0
    for i, (kind, idx) in enumerate(m.inputs):
        if kind == "arg":
            a, cn = m.args[idx], names.args[idx]
            w(f"    nb = (size_t)({_numel_c(names, a.shape)}) * sizeof({_C_TYPE[a.dtype]});")
            w(f"    if (overlaps_state(s, {cn}, nb)) {{ rc = stage_input(s, {idx}, {cn}, nb); "
              f"if (rc) return rc; s->table[{4 + i}] = s->in_stage[{idx}]; }}")
            w(f"    else s->table[{4 + i}] = (void*){cn};")
        elif kind == "flag":
            w(f"    s->flags[{fi}] = s->present[{idx}];")
            fi += 1
    w("    rng = s->rng;")
    for k in range(m.n_seeds):
        w(f"    s->seeds[{k}] = (int64_t)(splitmix64(&rng) & 0x7FFFFFFFFFFFFFFFull);")
    for (dtype, shape), cn in zip(m.outputs, names.outs):
        w(f"    if ({cn} && overlaps_state(s, {cn}, (size_t)({_numel_c(names, shape)}) * "
          f"sizeof({_C_TYPE[dtype]}))) return GRAPHC_EINVAL;")
    for j, ((dtype, shape), cn) in enumerate(zip(m.outputs, names.outs)):
        slot = 4 + n_in + j
        w(f"    if ({cn}) s->table[{slot}] = {cn};")
        w(f"    else {{ rc = stage_output(s, {j}, (size_t)({_numel_c(names, shape)}) * "
          f"sizeof({_C_TYPE[dtype]})); if (rc) return rc; s->table[{slot}] = "
          f"s->out_stage[{j}]; }}")
    w(f"""    for (tries = 0;; tries++) {{
        rc = (int){n}_kernel(s->table);
        if (rc != 2 || tries == 3) break;
        if (grow_scratch(s, s->info[1]) != GRAPHC_OK) return GRAPHC_ENOMEM;
    }}
    if (rc == 1) {{ memcpy(s->last_err, s->err, sizeof s->err); return GRAPHC_EINDEX; }}
    if (rc == 3) {{ memcpy(s->last_err, s->err, sizeof s->err); return GRAPHC_ENONFINITE; }}
    if (rc == 4) {{ memcpy(s->last_err, s->err, sizeof s->err); return GRAPHC_EBOUNDS; }}
    if (rc != 0) return GRAPHC_EINTERNAL;""")
    for t in m.mark_present:
        w(f"    s->present[{t}] = 1;")
    for t in m.mark_absent:
        w(f"    make_absent(s, {t});")
    w("    memcpy(s->last_hyper_v, s->hyper_v, sizeof s->hyper_v);")
    w("    s->rng = rng;\n    s->steps++;\n    return GRAPHC_OK;\n}\n")

    checked_names = "".join(cstr(x) + ", " for x in m.graph.meta.get("finite_names", ()))
    checked_names += "NULL"
    w(f"""size_t {n}_num_tensors(void) {{ return {nt}; }}

const {n}_tensor_info* {n}_tensor(size_t i) {{ return i < {nt} ? &TENSORS[i] : NULL; }}

int {n}_find(const char* name) {{
    int i;
    if (!name) return -1;
    for (i = 0; i < {nt}; i++)
        if (strcmp(TENSORS[i].name, name) == 0) return i;
    return -1;
}}

int {n}_get_param(const {n}_state* s, const char* name, void* out, size_t n) {{
    int i = {n}_find(name);
    if (!s || !out || i < 0 || n != TENSORS[i].numel) return GRAPHC_EINVAL;
    memcpy(out, s->data[i], TENSORS[i].nbytes);
    return GRAPHC_OK;
}}

int {n}_set_param({n}_state* s, const char* name, const void* in, size_t n) {{
    int i = {n}_find(name);
    if (!s || !in || i < 0 || n != TENSORS[i].numel) return GRAPHC_EINVAL;
    memcpy(s->data[i], in, TENSORS[i].nbytes);
    s->present[i] = 1;
    return GRAPHC_OK;
}}

void* {n}_param_data({n}_state* s, const char* name) {{
    int i = {n}_find(name);
    return (s && i >= 0) ? s->data[i] : NULL;
}}

int {n}_is_present(const {n}_state* s, const char* name) {{
    int i = {n}_find(name);
    return (s && i >= 0) ? s->present[i] : -1;
}}

int {n}_set_present({n}_state* s, const char* name, int present) {{
    int i = {n}_find(name);
    if (!s || i < 0) return GRAPHC_EINVAL;
    if (TENSORS[i].kind == GRAPHC_PARAM || TENSORS[i].kind == GRAPHC_BUFFER)
        return present ? GRAPHC_OK : GRAPHC_EINVAL;
    if (present) s->present[i] = 1;
    else make_absent(s, (size_t)i);
    return GRAPHC_OK;
}}

int64_t {n}_steps(const {n}_state* s) {{ return s ? s->steps : 0; }}

const char* {n}_checked(int64_t k) {{
    static const char* const names[] = {{{checked_names}}};
    return k >= 0 && k < (int64_t)(sizeof names / sizeof names[0]) - 1 ? names[k] : NULL;
}}

void {n}_last_error(const {n}_state* s, int64_t info[4]) {{
    if (s && info) memcpy(info, s->last_err, sizeof s->last_err);
}}

const char* {n}_strerror(int code) {{
    switch (code) {{
    case GRAPHC_OK: return "ok";
    case GRAPHC_EBATCH: return "batch size out of range";
    case GRAPHC_EINDEX: return "index (class target) out of range";
    case GRAPHC_ENOMEM: return "out of memory";
    case GRAPHC_EINVAL: return "invalid argument";
    case GRAPHC_ESTATE: return "gradient presence differs from the compiled step's";
    case GRAPHC_EIO: return "i/o error";
    case GRAPHC_EFORMAT: return "checkpoint does not match this step";
    case GRAPHC_EINTERNAL: return "internal error";
    case GRAPHC_ENONFINITE: return "the loss or a gradient holds NaN or Inf (not applied)";
    case GRAPHC_EBOUNDS: return "out-of-bounds access stopped (debug build)";
    default: return "unknown error";
    }}
}}
""")
    w(_CHECKPOINT_C.replace("NAME", n))
    w(f"static void write_doc(jbuf* jb, const {n}_state* s) {{")
    w(_doc_code(m))
    w("}\n")
    w(_SAVE_LOAD_C.replace("NAME", n).replace("@NH@", str(nh)))
    del N
    return "\n".join(L) + "\n"


_CHECKPOINT_C = r"""/* ---- checkpoints: JSON buffer, CRC-32, zip writer and reader ---- */
typedef struct { char* p; size_t n, cap; int oom; } jbuf;

static void jb_put(jbuf* b, const char* s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->cap ? b->cap * 2 : 4096);
        char* q;
        while (cap < b->n + n + 1) cap *= 2;
        q = (char*)realloc(b->p, cap);
        if (!q) { b->oom = 1; return; }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static void jb_lit(jbuf* b, const char* s) { jb_put(b, s, strlen(s)); }

static void jb_json_string(jbuf* b, const char* s) {
    char tmp[8];
    jb_lit(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { tmp[0] = '\\'; tmp[1] = (char)c; jb_put(b, tmp, 2); }
        else if (c < 32 || c >= 127) { snprintf(tmp, sizeof tmp, "\\u%04x", c); jb_lit(b, tmp); }
        else jb_put(b, (const char*)&c, 1);
    }
    jb_lit(b, "\"");
}

static void jb_double(jbuf* b, double v) {
    char tmp[40];
    if (v != v) { jb_lit(b, "{\"$float\": \"nan\"}"); return; }
    if (v > 1.7976931348623157e308) { jb_lit(b, "{\"$float\": \"inf\"}"); return; }
    if (v < -1.7976931348623157e308) { jb_lit(b, "{\"$float\": \"-inf\"}"); return; }
    snprintf(tmp, sizeof tmp, "%.17g", v);
    jb_lit(b, tmp);
    if (!strpbrk(tmp, ".eE")) jb_lit(b, ".0");
}

static void jb_array(jbuf* b, const NAME_state* s, int i) {
    if (!s->present[i]) { jb_lit(b, "null"); return; }
    jb_lit(b, "{\"$array\": ");
    jb_json_string(b, TENSORS[i].name);
    jb_lit(b, "}");
}

static uint32_t crc32_update(uint32_t crc, const unsigned char* p, size_t n) {
    crc = ~crc;
    while (n--) crc = CRC_TABLE[(crc ^ *p++) & 0xFFu] ^ (crc >> 8);
    return ~crc;
}

static void le16(unsigned char* p, unsigned v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}
static void le32(unsigned char* p, uint32_t v) { le16(p, v & 0xFFFFu); le16(p + 2, v >> 16); }
static unsigned rd16(const unsigned char* p) { return (unsigned)p[0] | ((unsigned)p[1] << 8); }
static uint32_t rd32(const unsigned char* p) {
    return (uint32_t)rd16(p) | ((uint32_t)rd16(p + 2) << 16);
}
static uint64_t rd64(const unsigned char* p) {
    return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32);
}

typedef struct { char name[512]; uint32_t crc, size, offset; } zentry;

typedef struct {
    FILE* f;
    uint32_t offset;
    zentry* ents;
    size_t n, cap;
    int err;
} zwriter;

static int zw_write(zwriter* z, const void* p, size_t n) {
    if (z->err) return -1;
    if (n && fwrite(p, 1, n, z->f) != n) { z->err = 1; return -1; }
    if ((uint64_t)z->offset + n > 0xFFFFFFFEu) { z->err = 2; return -1; }
    z->offset += (uint32_t)n;
    return 0;
}

/* One stored entry made of a .npy header and a data block. */
static int zw_entry(zwriter* z, const char* name, const char* hdr, size_t hlen,
                    const void* data, size_t dlen) {
    unsigned char lh[30];
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
    zentry* e;
    size_t nlen = strlen(name);
    uint64_t size = 10u + (uint64_t)hlen + dlen;
    if (z->err) return -1;
    if (nlen >= sizeof e->name || size > 0xFFFFFFFEu || hlen > 0xFFFFu) { z->err = 2; return -1; }
    if (z->n == z->cap) {
        size_t cap = z->cap ? z->cap * 2 : 16;
        zentry* q = (zentry*)realloc(z->ents, cap * sizeof *q);
        if (!q) { z->err = 3; return -1; }
        z->ents = q;
        z->cap = cap;
    }
    e = &z->ents[z->n++];
    memcpy(e->name, name, nlen + 1);
    le16(pre + 8, (unsigned)hlen);
    e->crc = crc32_update(crc32_update(crc32_update(0, pre, 10), (const unsigned char*)hdr, hlen),
                          (const unsigned char*)data, dlen);
    e->size = (uint32_t)size;
    e->offset = z->offset;
    memset(lh, 0, sizeof lh);
    le32(lh, 0x04034b50u);
    le16(lh + 4, 20);
    le16(lh + 12, 0x21);  /* 1980-01-01 */
    le32(lh + 14, e->crc);
    le32(lh + 18, e->size);
    le32(lh + 22, e->size);
    le16(lh + 26, (unsigned)nlen);
    zw_write(z, lh, 30);
    zw_write(z, name, nlen);
    zw_write(z, pre, 10);
    zw_write(z, hdr, hlen);
    zw_write(z, data, dlen);
    return z->err ? -1 : 0;
}

static int zw_finish(zwriter* z) {
    unsigned char ch[46], eocd[22];
    uint32_t start = z->offset;
    size_t i;
    if (z->n > 0xFFFEu) z->err = 2;
    for (i = 0; i < z->n && !z->err; i++) {
        zentry* e = &z->ents[i];
        size_t nlen = strlen(e->name);
        memset(ch, 0, sizeof ch);
        le32(ch, 0x02014b50u);
        le16(ch + 4, 20);
        le16(ch + 6, 20);
        le16(ch + 14, 0x21);
        le32(ch + 16, e->crc);
        le32(ch + 20, e->size);
        le32(ch + 24, e->size);
        le16(ch + 28, (unsigned)nlen);
        le32(ch + 42, e->offset);
        zw_write(z, ch, 46);
        zw_write(z, e->name, nlen);
    }
    memset(eocd, 0, sizeof eocd);
    le32(eocd, 0x06054b50u);
    le16(eocd + 8, (unsigned)z->n);
    le16(eocd + 10, (unsigned)z->n);
    le32(eocd + 12, z->offset - start);
    le32(eocd + 16, start);
    zw_write(z, eocd, 22);
    return z->err ? -1 : 0;
}

/* ---- the checkpoint reader ----
 * It applies the container rules listed in graphc/serialization.py's docstring, in the same
 * order as gc.load, so both readers accept and reject the same files (tests/
 * test_loader_fuzz.py runs one corpus through both). Every bound is written so that it
 * cannot wrap around: `x > size || n > size - x`, never `x + n > size`. */

/* A checked entry: its name (with ".npy") and its .npy image inside the file image. */
typedef struct { const unsigned char* name; size_t nlen; const unsigned char* npy; uint64_t size; }
    zent;

/* A parsed .npy header (the rules: serialization.py's docstring). */
typedef struct {
    char descr[16];
    uint64_t itemsize;
    int fortran, ndim;
    uint64_t shape[32];
    const unsigned char* data;
    uint64_t nbytes;
} npyinfo;

static int lit(const unsigned char** p, const unsigned char* e, const char* s) {
    size_t n = strlen(s);
    if ((size_t)(e - *p) < n || memcmp(*p, s, n) != 0) return 0;
    *p += n;
    return 1;
}

/* A size: decimal, no leading zero, at most 18 digits. */
static int npy_dim(const unsigned char** p, const unsigned char* e, uint64_t* v) {
    const unsigned char* q = *p;
    uint64_t x = 0;
    int k = 0;
    while (q < e && *q >= '0' && *q <= '9') {
        if (k == 18) return 0;
        x = x * 10u + (uint64_t)(*q - '0');
        q++;
        k++;
    }
    if (k == 0 || (k > 1 && **p == '0')) return 0;
    *v = x;
    *p = q;
    return 1;
}

/* The item size of a dtype the format allows (0: not allowed). */
static uint64_t descr_itemsize(const char* d) {
    static const char* const fixed[] = {"|b1", "|i1", "|u1", "<i2", "<i4", "<i8", "<u2",
                                        "<u4", "<u8", "<f2", "<f4", "<f8", "<c8", "<c16"};
    static const uint64_t size[] = {1, 1, 1, 2, 4, 8, 2, 4, 8, 2, 4, 8, 8, 16};
    size_t i, n = strlen(d);
    uint64_t v = 0;
    for (i = 0; i < sizeof size / sizeof size[0]; i++)
        if (strcmp(d, fixed[i]) == 0) return size[i];
    if (n < 3 || n > 10 || !((d[0] == '<' && d[1] == 'U') || (d[0] == '|' && d[1] == 'S')) ||
        d[2] < '1' || d[2] > '9')
        return 0;
    for (i = 2; i < n; i++) {
        if (d[i] < '0' || d[i] > '9') return 0;
        v = v * 10u + (uint64_t)(d[i] - '0');
    }
    return d[1] == 'U' ? 4u * v : v;
}

/* Parses and checks a .npy image of `size` bytes. Returns 0, or -1 if malformed. */
static int npy_parse(const unsigned char* p, uint64_t size, npyinfo* o) {
    uint64_t hlen, hoff, payload, numel = 1;
    const unsigned char *h, *e;
    size_t dl;
    int i, zero = 0;
    if (size < 10 || memcmp(p, "\223NUMPY", 6) != 0) return -1;
    if (p[6] == 1 && p[7] == 0) { hlen = rd16(p + 8); hoff = 10; }
    else if ((p[6] == 2 || p[6] == 3) && p[7] == 0 && size >= 12) { hlen = rd32(p + 8); hoff = 12; }
    else return -1;
    if (hlen > 4096 || hlen > size - hoff) return -1;
    h = p + hoff;
    e = h + hlen;
    if (!lit(&h, e, "{'descr': '")) return -1;
    for (dl = 0; dl < (size_t)(e - h) && h[dl] != '\''; dl++) {}
    if (dl == (size_t)(e - h) || dl >= sizeof o->descr) return -1;
    memcpy(o->descr, h, dl);
    o->descr[dl] = 0;
    h += dl + 1;
    o->itemsize = descr_itemsize(o->descr);
    if (!o->itemsize || !lit(&h, e, ", 'fortran_order': ")) return -1;
    if (lit(&h, e, "True")) o->fortran = 1;
    else if (lit(&h, e, "False")) o->fortran = 0;
    else return -1;
    if (!lit(&h, e, ", 'shape': (")) return -1;
    o->ndim = 0;
    if (!lit(&h, e, ")")) {
        if (!npy_dim(&h, e, &o->shape[0])) return -1;
        o->ndim = 1;
        if (!lit(&h, e, ",)")) {
            do {
                if (o->ndim == 32 || !lit(&h, e, ", ") || !npy_dim(&h, e, &o->shape[o->ndim]))
                    return -1;
                o->ndim++;
            } while (!lit(&h, e, ")"));
        }
    }
    if (!lit(&h, e, ", }")) return -1;
    while (h < e && *h == ' ') h++;
    if (e - h != 1 || *h != '\n') return -1;
    payload = size - hoff - hlen;
    for (i = 0; i < o->ndim; i++) if (o->shape[i] == 0) zero = 1;
    if (zero) numel = 0;
    else
        for (i = 0; i < o->ndim; i++) {
            if (numel > payload / o->shape[i]) return -1;
            numel *= o->shape[i];
        }
    if (numel > payload / o->itemsize || numel * o->itemsize != payload) return -1;
    o->data = p + hoff + hlen;
    o->nbytes = payload;
    return 0;
}

static int zent_cmp(const void* a, const void* b) {
    const zent* x = (const zent*)a;
    const zent* y = (const zent*)b;
    if (x->nlen != y->nlen) return x->nlen < y->nlen ? -1 : 1;
    return memcmp(x->name, y->name, x->nlen);
}

/* Checks the whole zip image and lists its entries, sorted by name (*out: malloc'ed).
 * Returns 0, -1 malformed, -2 out of memory. */
static int zip_index(const unsigned char* img, size_t len, zent** out, size_t* nout) {
    size_t eocd;
    uint64_t count, cd, cd_size, pos, end, k;
    zent* ents;
    npyinfo info;
    *out = NULL;
    *nout = 0;
    if (len < 22 || rd32(img) != 0x04034b50u) return -1;  /* np.load sniffs these bytes */
    eocd = len - 22;  /* no archive comment: the end record is the last 22 bytes */
    if (rd32(img + eocd) != 0x06054b50u || rd16(img + eocd + 20) != 0) return -1;
    count = rd16(img + eocd + 10);
    cd_size = rd32(img + eocd + 12);
    cd = rd32(img + eocd + 16);
    if (rd16(img + eocd + 4) || rd16(img + eocd + 6) || rd16(img + eocd + 8) != count) return -1;
    end = eocd;
    if (eocd >= 20 && rd32(img + eocd - 20) == 0x07064b50u) {  /* zip64 locator */
        uint64_t z64 = rd64(img + eocd - 12);
        if (rd32(img + eocd - 16) != 0 || rd32(img + eocd - 4) > 1) return -1;
        if (eocd - 20 < 56 || z64 != eocd - 20 - 56 || rd32(img + z64) != 0x06064b50u) return -1;
        count = rd64(img + z64 + 32);
        cd_size = rd64(img + z64 + 40);
        cd = rd64(img + z64 + 48);
        end = z64;
    }
    if (cd > end || cd_size != end - cd) return -1;
    if (count > cd_size / 46) return -1;
    ents = (zent*)malloc((size_t)(count ? count : 1) * sizeof *ents);
    if (!ents) return -2;
    pos = cd;
    for (k = 0; k < count; k++) {
        unsigned needed, flags, method, fl, el, cl;
        uint64_t v[3], crc, off, lpos;
        int big[3], j;
        const unsigned char *x, *xe, *name;
        if (46 > end - pos || rd32(img + pos) != 0x02014b50u) goto bad;
        needed = img[pos + 6];
        flags = rd16(img + pos + 8);
        method = rd16(img + pos + 10);
        crc = rd32(img + pos + 16);
        v[1] = rd32(img + pos + 20);  /* compressed size */
        v[0] = rd32(img + pos + 24);  /* uncompressed size */
        fl = rd16(img + pos + 28);
        el = rd16(img + pos + 30);
        cl = rd16(img + pos + 32);
        v[2] = rd32(img + pos + 42);  /* local header offset */
        if ((uint64_t)fl + el + cl > end - pos - 46) goto bad;
        name = img + pos + 46;
        for (j = 0; j < 3; j++) big[j] = v[j] == 0xFFFFFFFFu;
        x = name + fl;
        xe = x + el;
        while (x < xe) {
            const unsigned char *f, *fe;
            if (xe - x < 4 || rd16(x + 2) > (size_t)(xe - x) - 4) goto bad;
            if (rd16(x) == 1) {  /* zip64: the 0xFFFFFFFF fields, in order */
                f = x + 4;
                fe = f + rd16(x + 2);
                for (j = 0; j < 3; j++)
                    if (v[j] == 0xFFFFFFFFu && fe - f >= 8) { v[j] = rd64(f); big[j] = 0; f += 8; }
            }
            x += 4 + rd16(x + 2);
        }
        if (big[0] || big[1] || big[2]) goto bad;
        if (needed > 63 || (flags & ~0x0808u) || method != 0 || v[0] != v[1]) goto bad;
        if (fl < 5 || memcmp(name + fl - 4, ".npy", 4) != 0) goto bad;
        for (j = 0; j < (int)fl; j++)
            if (name[j] < 32 || name[j] > 126) goto bad;  /* printable ASCII names only */
        off = v[2];
        if (len < 30 || off > len - 30 || rd32(img + off) != 0x04034b50u ||
            rd16(img + off + 8) != 0)
            goto bad;
        if (rd16(img + off + 26) != fl || fl > len - off - 30 ||
            memcmp(img + off + 30, name, fl) != 0)
            goto bad;
        lpos = off + 30 + fl + rd16(img + off + 28);
        if (lpos > cd || v[1] > cd - lpos) goto bad;
        if (crc32_update(0, img + lpos, (size_t)v[1]) != crc) goto bad;
        if (npy_parse(img + lpos, v[1], &info) != 0) goto bad;
        ents[k].name = name;
        ents[k].nlen = fl;
        ents[k].npy = img + lpos;
        ents[k].size = v[1];
        pos += 46u + fl + el + cl;
    }
    if (pos != end) goto bad;
    qsort(ents, (size_t)count, sizeof *ents, zent_cmp);
    for (k = 1; k < count; k++)
        if (zent_cmp(&ents[k - 1], &ents[k]) == 0) goto bad;  /* duplicate names */
    *out = ents;
    *nout = (size_t)count;
    return 0;
bad:
    free(ents);
    return -1;
}

/* The entry named `name` in a sorted index, or NULL. */
static const zent* zip_lookup(const zent* ents, size_t n, const char* name) {
    zent key;
    key.name = (const unsigned char*)name;
    key.nlen = strlen(name);
    key.npy = NULL;
    key.size = 0;
    return (const zent*)bsearch(&key, ents, n, sizeof *ents, zent_cmp);
}

/* Whether entry `e` (already checked by zip_index) holds `descr` with this shape. */
static int npy_matches(const zent* e, const char* descr, const int64_t* shape, int ndim,
                       npyinfo* info) {
    int i;
    if (npy_parse(e->npy, e->size, info) != 0 || strcmp(info->descr, descr) != 0 ||
        info->ndim != ndim)
        return 0;
    for (i = 0; i < ndim; i++)
        if ((int64_t)info->shape[i] != shape[i]) return 0;
    return 1;
}

/* Copies a Fortran-order array into C order. */
static void copy_fortran(unsigned char* dst, const npyinfo* a) {
    uint64_t n = 1, i, fs[32], idx[32];
    int k;
    for (k = 0; k < a->ndim; k++) { fs[k] = n; n *= a->shape[k]; idx[k] = 0; }
    for (i = 0; i < n; i++) {
        uint64_t o = 0;
        for (k = 0; k < a->ndim; k++) o += idx[k] * fs[k];
        memcpy(dst + i * a->itemsize, a->data + o * a->itemsize, (size_t)a->itemsize);
        for (k = a->ndim - 1; k >= 0; k--) {
            if (++idx[k] < a->shape[k]) break;
            idx[k] = 0;
        }
    }
}
"""

_SAVE_LOAD_C = r"""static int fsync_dir(const char* path) {
    char dir[4096];
    const char* slash = strrchr(path, '/');
    int fd;
    if (!slash) { dir[0] = '.'; dir[1] = 0; }
    else {
        size_t n = (size_t)(slash - path);
        if (n == 0) n = 1;
        if (n >= sizeof dir) return 0;
        memcpy(dir, path, n);
        dir[n] = 0;
    }
    fd = open(dir, O_RDONLY);
    if (fd < 0) return 0;
    fsync(fd);
    close(fd);
    return 0;
}

int NAME_save(const NAME_state* s, const char* path) {
    jbuf jb = {NULL, 0, 0, 0};
    zwriter z;
    char* tmp;
    char* uhdr = NULL;
    unsigned char* u32 = NULL;
    char name[600];
    size_t i, plen;
    int fd, rc = GRAPHC_OK, saved_errno = 0;
    char hdr[128];
    if (!s || !path) return GRAPHC_EINVAL;
    write_doc(&jb, s);
    if (jb.oom) { free(jb.p); return GRAPHC_ENOMEM; }
    plen = strlen(path);
    tmp = (char*)malloc(plen + 16);
    u32 = (unsigned char*)malloc(jb.n * 4 + 1);
    uhdr = (char*)malloc(160);
    if (!tmp || !u32 || !uhdr) {
        free(tmp); free(u32); free(uhdr); free(jb.p);
        return GRAPHC_ENOMEM;
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp.XXXXXX", 12);
    fd = mkstemp(tmp);
    if (fd < 0) { free(tmp); free(u32); free(uhdr); free(jb.p); return GRAPHC_EIO; }
    memset(&z, 0, sizeof z);
    z.f = fdopen(fd, "wb");
    if (!z.f) { saved_errno = errno; close(fd); unlink(tmp); free(tmp); free(u32); free(uhdr);
                free(jb.p); errno = saved_errno; return GRAPHC_EIO; }
    /* the JSON document: a 0-d unicode array (UTF-32LE) */
    for (i = 0; i < jb.n; i++) { le32(u32 + 4 * i, (unsigned char)jb.p[i]); }
    {
        int k = snprintf(uhdr, 160, "{'descr': '<U%lu', 'fortran_order': False, 'shape': (), }",
                         (unsigned long)jb.n);
        while ((10 + k + 1) % 64) uhdr[k++] = ' ';
        uhdr[k++] = '\n';
        zw_entry(&z, "__graphc__.npy", uhdr, (size_t)k, u32, jb.n * 4);
    }
    for (i = 0; i < NT && i < NAME_num_tensors(); i++) {
        if (!s->present[i]) continue;
        snprintf(name, sizeof name, "%s.npy", TENSORS[i].name);
        zw_entry(&z, name, NPY_HEADER[i], strlen(NPY_HEADER[i]), s->data[i], TENSORS[i].nbytes);
    }
    {
        int k = snprintf(hdr, sizeof hdr,
                         "{'descr': '<i8', 'fortran_order': False, 'shape': (), }");
        while ((10 + k + 1) % 64) hdr[k++] = ' ';
        hdr[k++] = '\n';
        zw_entry(&z, "__aot_steps__.npy", hdr, (size_t)k, &s->steps, 8);
        k = snprintf(hdr, sizeof hdr, "{'descr': '<f8', 'fortran_order': False, 'shape': (%d,), }",
                     @NH@);
        while ((10 + k + 1) % 64) hdr[k++] = ' ';
        hdr[k++] = '\n';
        zw_entry(&z, "__aot_hyper__.npy", hdr, (size_t)k, s->last_hyper_v, 8 * @NH@);
    }
    zw_finish(&z);
    if (z.err == 1) saved_errno = errno;
    if (z.err) rc = z.err == 3 ? GRAPHC_ENOMEM : GRAPHC_EIO;
    if ((fflush(z.f) != 0 || fsync(fileno(z.f)) != 0) && !rc) {
        rc = GRAPHC_EIO;
        saved_errno = errno;
    }
    if (fclose(z.f) != 0 && !rc) { rc = GRAPHC_EIO; saved_errno = errno; }
    if (!rc && rename(tmp, path) != 0) { rc = GRAPHC_EIO; saved_errno = errno; }
    if (rc) unlink(tmp);
    else fsync_dir(path);
    free(z.ents); free(tmp); free(u32); free(uhdr); free(jb.p);
    if (saved_errno) errno = saved_errno;
    return rc;
}

static const char* descr_of(int dtype) {
    switch (dtype) {
    case GRAPHC_FLOAT32: return "<f4";
    case GRAPHC_FLOAT64: return "<f8";
    case GRAPHC_INT64: return "<i8";
    case GRAPHC_INT32: return "<i4";
    default: return "|b1";
    }
}

int NAME_load(NAME_state* s, const char* path) {
    FILE* f;
    struct stat st;
    long len;
    unsigned char* img;
    npyinfo *src, meta, steps, hyp;  /* src: one per tensor, on the heap (~300 bytes each) */
    int have[NT], have_steps = 0, have_hyp = 0;
    char name[600];
    size_t i, n = 0;
    int r, rc = GRAPHC_OK;
    zent* ents = NULL;
    const zent* e;
    if (!s || !path) return GRAPHC_EINVAL;
    f = fopen(path, "rb");
    if (!f) return GRAPHC_EIO;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {  /* a directory, a FIFO */
        fclose(f);
        errno = EINVAL;
        return GRAPHC_EIO;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f); return GRAPHC_EIO;
    }
    img = (unsigned char*)malloc((size_t)len + 1);
    if (!img) { fclose(f); return GRAPHC_ENOMEM; }
    if (fread(img, 1, (size_t)len, f) != (size_t)len) { fclose(f); free(img); return GRAPHC_EIO; }
    fclose(f);
    src = (npyinfo*)malloc(NT * sizeof *src);
    r = src ? zip_index(img, (size_t)len, &ents, &n) : -2;
    if (r == -2) rc = GRAPHC_ENOMEM;
    else if (r != 0) rc = GRAPHC_EFORMAT;
    if (!rc) {  /* the JSON document: present and a 0-d unicode array (not parsed here) */
        e = zip_lookup(ents, n, "__graphc__.npy");
        if (!e || npy_parse(e->npy, e->size, &meta) != 0 || meta.descr[0] != '<' ||
            meta.descr[1] != 'U' || meta.ndim != 0)
            rc = GRAPHC_EFORMAT;
    }
    for (i = 0; i < NT && i < NAME_num_tensors() && !rc; i++) {
        have[i] = 0;
        snprintf(name, sizeof name, "%s.npy", TENSORS[i].name);
        e = zip_lookup(ents, n, name);
        if (!e) {
            if (TENSORS[i].kind == GRAPHC_PARAM || TENSORS[i].kind == GRAPHC_BUFFER)
                rc = GRAPHC_EFORMAT;
        } else if (!npy_matches(e, descr_of(TENSORS[i].dtype), TENSORS[i].shape,
                                TENSORS[i].ndim, &src[i]) ||
                   src[i].nbytes != TENSORS[i].nbytes) {
            rc = GRAPHC_EFORMAT;
        } else {
            have[i] = 1;
        }
    }
    if (!rc) {
        int64_t one = 1, nh = @NH@;
        e = zip_lookup(ents, n, "__aot_steps__.npy");
        if (e && !(have_steps = npy_matches(e, "<i8", &one, 0, &steps))) rc = GRAPHC_EFORMAT;
        e = zip_lookup(ents, n, "__aot_hyper__.npy");
        if (e && !(have_hyp = npy_matches(e, "<f8", &nh, 1, &hyp))) rc = GRAPHC_EFORMAT;
    }
    if (!rc) {  /* everything checked: commit */
        for (i = 0; i < NT && i < NAME_num_tensors(); i++) {
            if (have[i]) {
                if (src[i].fortran && src[i].ndim > 1)
                    copy_fortran((unsigned char*)s->data[i], &src[i]);
                else memcpy(s->data[i], src[i].data, TENSORS[i].nbytes);
                s->present[i] = 1;
            } else {
                make_absent(s, i);
            }
        }
        if (have_steps) memcpy(&s->steps, steps.data, 8);
        if (have_hyp && @NH@) memcpy(s->last_hyper_v, hyp.data, 8 * @NH@);
    }
    free(src);
    free(ents);
    free(img);
    return rc;
}
"""
