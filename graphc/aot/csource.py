"""The C sources of an ahead-of-time step: ``NAME.h`` and the wrapper ``NAME.c``.

The wrapper owns everything the LLVM kernel does not: the state (one aligned buffer per
tensor, presence flags, the scratch arena), the pointer table the kernel reads
(``[syms, scratch, scratch_info, err, inputs..., outputs..., updates...]``, see
``codegen/abi.py``), argument checks, and checkpoints (:mod:`graphc.aot.checkpoint`). It is
plain C99 plus POSIX (``mkstemp``, ``fsync``, ``rename``) so any C compiler builds it.

The C itself is in ``graphc/aot/c/`` (``step.h``, ``graphc_aot.h``, ``wrapper.c``,
``checkpoint_io.c``, ``save_load.c``); this module computes what depends on the step (names,
shapes, tables, the body of ``NAME_step``) and fills the templates in
(:mod:`graphc.aot.templates`).
"""

from __future__ import annotations

from typing import Any

from graphc.codegen.abi import TABLE_FIXED

from .checkpoint import doc_code
from .ctext import C_TYPE, DESCR, ENUM, KIND, Names, c_double, cstr, numel_c
from .model import AotModel
from .templates import render

__all__ = ["generate_header", "generate_source"]


def _step_params(m: AotModel, names: Names) -> list[tuple[str, str]]:
    """(C declaration, doc) for each parameter of NAME_step after the state."""
    ps = []
    for a, cn in zip(m.args, names.args):
        ps.append((f"const {C_TYPE[a.dtype]}* {cn}",
                   f"argument {a.name!r}: {a.dtype.name}{names.shape_doc(a.shape)}, C order, "
                   "read only, borrowed for the call"))
    for s in m.symbols:
        ps.append((f"int64_t {names.syms[s]}",
                   f"the size of symbolic dimension {s.name} (the batch size), "
                   "1..GRAPHC_MAX_BATCH"))
    ps.append((f"const {m.name}_hyper* hyper",
               f"run-time hyperparameters; NULL means {m.name}_default_hyper()"))
    for (dtype, shape), cn in zip(m.outputs, names.outs):
        ps.append((f"{C_TYPE[dtype]}* {cn}",
                   f"result: {dtype.name}{names.shape_doc(shape)}, written only on success; "
                   "caller-owned; NULL discards it"))
    return ps


def generate_header(m: AotModel) -> str:
    """``NAME.h``: the documented C interface of the step (template ``c/step.h``)."""
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
    return render(
        "step.h", NAME=n, NAME_UPPER=N, STEP_NAME=m.step_name or n, ARG_DOC=arg_doc,
        TARGET=m.target, CPU=repr(m.cpu), TENSOR_DOC=tensor_doc, BAKED=baked, GUARDS=guards,
        GRAPHC_AOT_H=render("graphc_aot.h"), NUM_TENSORS=len(m.tensors),
        NUM_HYPER=len(m.hypers), MAX_RANK=max_rank, HYPER_FIELDS=hyper_fields,
        PARAM_DOC=param_doc, STEP_DECL=step_decl)


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
    d = f"{{'descr': '{DESCR[t.dtype]}', 'fortran_order': False, 'shape': {shape}, }}"
    total = 10 + len(d) + 1
    d += " " * (-total % 64) + "\n"
    return d



def generate_source(m: AotModel, offsets: list[int]) -> str:
    """``NAME.c``: templates ``c/wrapper.c``, ``c/checkpoint_io.c`` and ``c/save_load.c``
    with the step's tables and the body of ``NAME_step`` filled in."""
    n = m.name
    names = Names(m)
    nt = len(m.tensors)
    nh = len(m.hypers)
    n_in = len(m.inputs)
    n_out = len(m.outputs)
    table = TABLE_FIXED + n_in + n_out + len(m.updates)
    n_flags = sum(1 for k, _ in m.inputs if k == "flag")

    tensors = [f"    {{{cstr(t.name)}, {KIND[t.kind]}, {ENUM[t.dtype]}, {len(t.shape)}, "
               f"{{{', '.join(str(d) for d in t.shape) or '0'}}}, {t.numel}u, {t.nbytes}u}},"
               for t in m.tensors] or ['    {"", 0, 0, 0, {0}, 0u, 0u},']
    npy_headers = [f"    {cstr(_npy_header(t))}," for t in m.tensors] or ['    ""']

    # the pointer table's fixed bindings (codegen/abi.py: inputs start at TABLE_FIXED)
    bind = []
    fi = 0
    for i, (kind, idx) in enumerate(m.inputs):
        slot = TABLE_FIXED + i
        if kind == "tensor":
            bind.append(f"    s->table[{slot}] = s->data[{idx}];")
        elif kind == "flag":
            bind.append(f"    s->table[{slot}] = &s->flags[{fi}];")
            fi += 1
        elif kind == "hyper":
            bind.append(f"    s->table[{slot}] = &s->hyper_v[{idx}];")
        elif kind == "seed":
            bind.append(f"    s->table[{slot}] = &s->seeds[{idx}];")
    base = TABLE_FIXED + n_in + n_out
    bind += [f"    s->table[{base + j}] = s->data[{t}];" for j, t in enumerate(m.updates)]

    # NAME_step: argument checks, per-call bindings, results, and what a success commits
    params = _step_params(m, names)
    checks = [f"    if ({v} < 1 || {v} > GRAPHC_MAX_BATCH) return GRAPHC_EBATCH;"
              for v in (names.syms[s] for s in m.symbols)]
    checks += [f"    if (!{cn}) return GRAPHC_EINVAL;" for cn in names.args]
    checks += [f"    if (s->present[{t}] != {1 if p else 0}) return GRAPHC_ESTATE;"
               for t, p in m.presence_guards]
    syms = []
    for j, sym in enumerate(m.kernel_symbols):
        if sym not in names.syms:
            raise ValueError(f"kernel symbol {sym} is not a batch size of the arguments")
        syms.append(f"    s->syms[{j}] = {names.syms[sym]};")
    inputs = []
    fi = 0
    for i, (kind, idx) in enumerate(m.inputs):
        slot = TABLE_FIXED + i
        if kind == "arg":
            a, cn = m.args[idx], names.args[idx]
            inputs.append(f"    nb = (size_t)({numel_c(names, a.shape)}) * "
                          f"sizeof({C_TYPE[a.dtype]});")
            inputs.append(f"    if (overlaps_state(s, {cn}, nb)) {{ rc = stage_input(s, {idx}, "
                          f"{cn}, nb); if (rc) return rc; s->table[{slot}] = "
                          f"s->in_stage[{idx}]; }}")
            inputs.append(f"    else s->table[{slot}] = (void*){cn};")
        elif kind == "flag":
            inputs.append(f"    s->flags[{fi}] = s->present[{idx}];")
            fi += 1
    seeds = [f"    s->seeds[{k}] = (int64_t)(splitmix64(&rng) & 0x7FFFFFFFFFFFFFFFull);"
             for k in range(m.n_seeds)]
    outputs = []
    for (dtype, shape), cn in zip(m.outputs, names.outs):
        outputs.append(f"    if ({cn} && overlaps_state(s, {cn}, (size_t)"
                       f"({numel_c(names, shape)}) * sizeof({C_TYPE[dtype]}))) "
                       "return GRAPHC_EINVAL;")
    for j, ((dtype, shape), cn) in enumerate(zip(m.outputs, names.outs)):
        slot = TABLE_FIXED + n_in + j
        outputs.append(f"    if ({cn}) s->table[{slot}] = {cn};")
        outputs.append(f"    else {{ rc = stage_output(s, {j}, (size_t)"
                       f"({numel_c(names, shape)}) * sizeof({C_TYPE[dtype]})); "
                       f"if (rc) return rc; s->table[{slot}] = s->out_stage[{j}]; }}")
    commit = [f"    s->present[{t}] = 1;" for t in m.mark_present]
    commit += [f"    make_absent(s, {t});" for t in m.mark_absent]
    checked = "".join(cstr(x) + ", " for x in m.graph.meta.get("finite_names", ())) + "NULL"

    wrapper = render(
        "wrapper.c", NAME=n, NUM_TENSORS=nt,
        NT=max(nt, 1), NH=max(nh, 1), NTABLE=table, NOUT=max(n_out, 1),
        NFLAGS=max(n_flags, 1), NARG=max(len(m.args), 1), NSEEDS=max(m.n_seeds, 1),
        NSYM=max(len(m.kernel_symbols), 1),
        TENSORS="\n".join(tensors),
        BLOB_OFFSET=", ".join(map(str, offsets)) or "0",
        INIT_PRESENT=", ".join("1" if t.present else "0" for t in m.tensors) or "0",
        FILL=", ".join(c_double(t.fill) for t in m.tensors) or "0.0",
        NPY_HEADER="\n".join(npy_headers),
        HYPER_LABEL=", ".join(cstr(h.label) for h in m.hypers) or '""',
        CRC_TABLE=_crc_table(),
        DEFAULT_HYPER="\n".join(f"    h.{h.field} = {c_double(h.default)};" for h in m.hypers),
        HYPER_TO_ARRAY="\n".join(f"    v[{k}] = h->{h.field};" for k, h in enumerate(m.hypers)),
        BIND_FIXED="\n".join(bind),
        STEP_PARAMS=",\n".join(f"        {d}" for d, _ in params),
        STEP_CHECKS="\n".join(checks), STEP_SYMS="\n".join(syms),
        STEP_INPUTS="\n".join(inputs), STEP_SEEDS="\n".join(seeds),
        STEP_OUTPUTS="\n".join(outputs), STEP_COMMIT="\n".join(commit),
        CHECKED_NAMES=checked)
    checkpoint_io = render("checkpoint_io.c", NAME=n)
    save_load = render("save_load.c", NAME=n, NUM_HYPER=nh, WRITE_DOC=doc_code(m))
    return "\n".join([wrapper, checkpoint_io, save_load]) + "\n"
