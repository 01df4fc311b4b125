"""One self-contained HTML page that shows a compiled step: ``step.explain()`` and
``graphc dump ... --format html``.

Reading a few hundred IR lines is how one checks a compiler, but it is not how one *sees* what
a step does. The page puts every IR stage next to the user's own source lines (each node keeps
the ``file:line`` it was traced from in ``node.loc``), draws the kernel plan (which nodes fused
into which loop, which kernels run as one loop group), the scratch arena over time (which
buffer occupies which bytes while which kernels run), and, for a ``GRAPHC_PROFILE=1`` build,
each kernel's share of the step's native time.

The page must open anywhere a step is debugged (a CI artifact, a laptop offline, a mail
attachment), so it is one file with inline CSS, SVG and a small script, and no network: no
CDN, no fonts, no external links. Everything is rendered here in Python (readable without
JavaScript); the script only adds stage tabs and click-to-highlight between IR rows, source
lines, kernels, arena blocks and profile bars. When it has run without an exception it sets
``data-graphc-explain="ok"`` on ``<html>`` (``"error: ..."`` otherwise), which the browser
test reads back.
"""

from __future__ import annotations

import linecache
import os
import zlib
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import Any

MARKER = "data-graphc-explain"  # set to "ok" on <html> by the page's script when it ran
TEXT_STAGE_MAX_LINES = 20000  # LLVM IR / assembly of a large step: keep the page openable
CONTEXT = 2  # source lines shown around each line that produced nodes


def _e(x: object) -> str:
    return escape(str(x), quote=True)


def _variant(fn: Any) -> Any:
    if not getattr(fn, "variants", None):
        raise RuntimeError(f"{getattr(fn, 'name', 'step')} has not been compiled yet: call it "
                           "once or pass example_args")
    return fn._last or fn.variants[-1]


def _is_graph(x: Any) -> bool:
    from .ir import Graph

    return isinstance(x, Graph)


def pick_stages(fn: Any, stages: str | Sequence[str] | None) -> list[str]:
    """``None``: the IR graph stages (the ones that carry source lines); ``"all"``: every
    stage, the native text ones (LLVM IR, assembly) as collapsed blocks; or the named ones."""
    v = _variant(fn)
    if stages is None:
        return [s for s, g in v.stages.items() if _is_graph(g)]
    names = list(v.stages) if stages == "all" else [stages] if isinstance(stages, str) \
        else list(stages)
    bad = [s for s in names if s not in v.stages]
    if bad:
        raise ValueError(f"stages: {fn.name} has no stage {bad[0]!r}; its stages are: "
                         + ", ".join(v.stages))
    return names


def _stage(v: Any, name: str) -> Any:
    s = v.stages[name]
    if callable(s) and not _is_graph(s):
        s = v.stages[name] = s()  # lazily rendered text, cached as CompiledFunction.ir does
    return s


class _Locs:
    """Source locations ``file:line`` -> short ids (``L3``), and the lines' text."""

    def __init__(self) -> None:
        self.ids: dict[str, str] = {}

    def id(self, loc: str | None) -> str | None:
        if not loc:
            return None
        if loc not in self.ids:
            self.ids[loc] = f"L{len(self.ids)}"
        return self.ids[loc]

    @staticmethod
    def split(loc: str) -> tuple[str, int]:
        path, _, line = loc.rpartition(":")
        return path, int(line) if line.isdigit() else 0

    def text(self, loc: str) -> str:
        path, line = self.split(loc)
        return linecache.getline(path, line).strip() if line else ""


def _short(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("..") else Path(path).name


def _where(loc: str) -> str:
    path, line = _Locs.split(loc)
    return f"{_short(path)}:{line}"


# -- the IR stages -----------------------------------------------------------------------

def _graph_rows(g: Any, stage: str, locs: _Locs, kernels: dict[int, list[int]]) -> str:
    """One row per line of ``format_graph``: node rows carry their source location, the
    source text and (optimized stage) the kernels that compute them."""
    from .ir.text import format_graph

    lines = format_graph(g).splitlines()
    nodes = [n for n in g.nodes() if n.op != "input"]
    start = lines.index("{") + 1 if "{" in lines else len(lines)
    ok = all(start + j < len(lines) and lines[start + j].lstrip().startswith(f"%{j} = ")
             for j in range(len(nodes)))
    out, prev = [], None
    for i, line in enumerate(lines):
        j = i - start
        if not ok or not 0 <= j < len(nodes):
            out.append(f'<div class="r">{_e(line)}</div>')
            continue
        n = nodes[j]
        lid = locs.id(n.loc)
        ks = kernels.get(n.id, []) if stage == "optimized" else []
        badges = "".join(f'<span class="kb" data-k="{k}">k{k}</span>' for k in ks)
        src = ""
        if n.loc:
            txt = locs.text(n.loc) if n.loc != prev else ""
            src = (f'<span class="loc">{_e(_where(n.loc))}</span>'
                   f'<span class="st">{_e(txt)}</span>')
        prev = n.loc
        attrs = f' data-loc="{lid}"' if lid else ""
        title = f"{_where(n.loc)}: {locs.text(n.loc)}" if n.loc else "no source location"
        out.append(f'<div class="r n" id="n-{_e(stage)}-{j}" data-n="{j}"{attrs} '
                   f'title="{_e(title)}"><span class="c">{_e(line)}</span>{badges}{src}</div>')
    return "\n".join(out)


def _source_pane(locs: _Locs) -> str:
    """The user's lines that produced nodes, with a little context, file by file."""
    by_file: dict[str, set[int]] = {}
    for loc in locs.ids:
        path, line = _Locs.split(loc)
        by_file.setdefault(path, set()).add(line)
    parts = []
    for path, hot in sorted(by_file.items()):
        show = sorted({k for h in hot for k in range(max(1, h - CONTEXT), h + CONTEXT + 1)})
        parts.append(f'<div class="fh" title="{_e(path)}">{_e(_short(path))}</div>')
        last = 0
        for k in show:
            text = linecache.getline(path, k)
            if not text and k not in hot:
                continue
            if last and k > last + 1:
                parts.append('<div class="gap">\u22ef</div>')
            last = k
            loc = f"{path}:{k}"
            if k in hot:
                lid = locs.ids[loc]
                parts.append(f'<div class="sl hot" id="src-{lid}" data-loc="{lid}">'
                             f'<span class="ln">{k}</span>{_e(text.rstrip())}</div>')
            else:
                parts.append(f'<div class="sl"><span class="ln">{k}</span>'
                             f'{_e(text.rstrip())}</div>')
    return "\n".join(parts) or '<p class="note">No node has a source location.</p>'


# -- the kernel plan, the arena, the profile ---------------------------------------------

def _plan(exe: Any) -> Any:
    """The kernel and memory plan of a native backend (CPU: ``lowering.plan``, PTX:
    ``program.plan``), or None (interpreter, distributed steps)."""
    for owner in ("lowering", "program"):
        try:
            p = getattr(getattr(exe, owner, None), "plan", None)
        except Exception:  # noqa: BLE001 - no plan is a fine answer for a picture
            p = None
        if p is not None and hasattr(p, "materialized"):
            return p
    return None


def _lifetimes(p: Any) -> dict[int, tuple[int, int]]:
    """node id -> (first kernel, last kernel reading it), as ``planning._assign_offsets`` decides
    them: a loop group's members live over the whole group; outputs and updates to the end."""
    from graphc.codegen.planning import reads_of

    mat = {n.id for n in p.materialized}
    index = {n.id: i for i, n in enumerate(p.materialized)}
    end, roots = len(p.materialized), {n.id for n in p.graph.roots}
    first_of = {n.id: index[grp[0].id] for grp in p.groups for n in grp}
    last_of = {n.id: index[grp[-1].id] for grp in p.groups for n in grp}
    last = {n.id: end if n.id in roots else last_of.get(n.id, index[n.id])
            for n in p.materialized}
    for i, n in enumerate(p.materialized):
        for x in reads_of(n, mat):
            if x.id in last and x.id not in roots:
                last[x.id] = max(last[x.id], last_of.get(n.id, i))
    return {n.id: (first_of.get(n.id, index[n.id]), last[n.id]) for n in p.materialized}


def _kernels_of(p: Any) -> dict[int, list[int]]:
    """node id -> the kernels (``k`` numbers, as in ``ir("fused")``) that compute it."""
    from graphc.codegen.planning import closure_of

    mat = {n.id for n in p.materialized}
    out: dict[int, list[int]] = {}
    for i, n in enumerate(p.materialized):
        for x in closure_of(n, mat):
            out.setdefault(x.id, []).append(i)
    return out


def _hue(op: str) -> int:
    return zlib.crc32(op.encode()) % 360


def _ev(x: Any, env: dict) -> int | None:
    """A symbolic size or offset at the example arguments' symbol values (None if unbound)."""
    from graphc.ir import shapes as sh

    try:
        return sh.evaluate(x, env)
    except Exception:  # noqa: BLE001 - an unbound symbol: the picture leaves it out
        return None


def _plan_table(p: Any, g: Any, env: dict) -> str:
    from graphc.codegen.planning import closure_of, nbytes, reads_of
    from graphc.ir import shapes as sh
    from graphc.ir.text import type_str

    mat = {n.id for n in p.materialized}
    names = {n.id: n.attrs["name"] for n in g.inputs}
    names.update({n.id: f"%{p.node_index[n.id]}" for n in p.order if n.op != "input"})
    slots = [s for s, _ in g.updates]

    def ref(x: Any) -> str:
        if x.op == "input":
            return f'<span class="in">{_e(names[x.id])}</span>'
        return f'<a class="nref" href="#n-optimized-{p.node_index[x.id]}" ' \
               f'data-n="{p.node_index[x.id]}">{_e(names[x.id])}</a>'

    rows = ['<table class="plan"><tr><th>kernel</th><th>computes</th><th>result</th>'
            '<th>fuses inline</th><th>reads</th><th>source</th></tr>']
    for i, n in enumerate(p.materialized):
        gi = p.group_of.get(n.id)
        if gi is not None and p.groups[gi][0] is n and gi in p.passes:
            rows.append(f'<tr class="gh"><td colspan="6">channel group of {len(p.groups[gi])}:'
                        f' channel by channel, {len(set(p.passes[gi]))} passes</td></tr>')
        elif gi is not None and p.groups[gi][0] is n:
            rows.append(f'<tr class="gh"><td colspan="6">loop group of {len(p.groups[gi])}: '
                        f'one loop over {_e(type_str(n))}</td></tr>')
        if n.id in p.direct:
            where = f"in place \u2192 {_e(slots[p.direct[n.id]])}"
        elif n.id in p.out_direct:
            where = f"output {p.out_direct[n.id]}"
        elif n.id in p.virtual:
            where = "registers only"
        else:
            off, size = _ev(p.offsets[n.id], env), _ev(nbytes(n), env)
            sym = f"arena+{sh.fmt_dim(p.offsets[n.id])}"
            where = (f'<span title="{_e(sym)}">arena [{off}, {off + size})</span>'
                     if off is not None and size is not None else _e(sym))
        inline = sorted((x for x in closure_of(n, mat) if x is not n),
                        key=lambda x: p.node_index[x.id])
        fused = ", ".join(f"{ref(x)}&nbsp;{_e(x.op)}" for x in inline)
        reads = ", ".join(ref(x) for x in reads_of(n, mat))
        src = _e(_where(n.loc)) if n.loc else ""
        cls = "k grp" if gi is not None else "k"
        rows.append(f'<tr class="{cls}" id="k{i}" data-k="{i}" data-n="{p.node_index[n.id]}">'
                    f'<td>k{i}</td><td>{ref(n)} = {_e(n.op)} : {_e(type_str(n))}</td>'
                    f'<td>{where}</td><td>{fused}</td><td>{reads}</td><td>{src}</td></tr>')
    rows.append("</table>")
    return "\n".join(rows)


def _arena_svg(p: Any, env: dict) -> str:
    """Buffers as rectangles: x = the kernels during which a buffer is live, y = its bytes."""
    from graphc.codegen.abi import align
    from graphc.codegen.planning import nbytes
    from graphc.ir.text import type_str

    def ev(x: Any) -> int | None:
        return _ev(x, env)

    total, work = ev(p.scratch_bytes), ev(p.work_offset)
    if not total:
        return '<p class="note">This step needs no scratch arena.</p>'
    life, end = _lifetimes(p), len(p.materialized)
    cols = end + 1  # the last column: the commit of outputs and updates
    cw = max(8.0, min(40.0, 1000.0 / cols))
    left, top, h = 90, 10, 360
    w = cw * cols
    sy = h / total
    parts = [f'<svg class="arena" width="{left + w + 20:.0f}" height="{top + h + 40}" '
             f'viewBox="0 0 {left + w + 20:.0f} {top + h + 40}" role="img" '
             f'aria-label="scratch arena over time">',
             f'<rect x="{left}" y="{top}" width="{w:.1f}" height="{h}" class="bg"/>']
    if work is not None and total > work:
        y0 = top + h - total * sy
        parts.append(f'<rect class="work" x="{left}" y="{y0:.1f}" width="{w:.1f}" '
                     f'height="{(total - work) * sy:.1f}"><title>GEMM/convolution packing '
                     f'workspace: bytes {work}..{total} ({total - work} B), shared by every '
                     f'matmul and convolution kernel</title></rect>')
        if (total - work) * sy >= 14:
            parts.append(f'<text class="lbl" x="{left + 6}" y="{y0 + 13:.1f}">GEMM/convolution '
                         f'packing workspace ({total - work} B)</text>')
    for n in p.materialized:
        off = ev(p.offsets.get(n.id)) if n.id in p.offsets else None
        size = ev(nbytes(n))
        asize = ev(align(nbytes(n)))
        if off is None or size is None:
            continue
        a, b = life[n.id]
        k = p.node_index[n.id]
        y = top + h - (off + (asize or size)) * sy
        until = "commit" if b >= end else f"k{b}"
        parts.append(
            f'<rect class="buf" data-n="{k}" x="{left + a * cw:.1f}" y="{y:.1f}" '
            f'width="{(min(b, end) - a + 1) * cw:.1f}" '
            f'height="{max(1.0, (asize or size) * sy):.1f}" '
            f'fill="hsl({_hue(n.op)},60%,62%)"><title>%{k} {_e(n.op)} : '
            f'{_e(type_str(n))}, bytes {off}..{off + size} ({size} B), live k{a}..{until}'
            f'</title></rect>')
        bw, bh = (min(b, end) - a + 1) * cw, (asize or size) * sy
        if bw >= 34 and bh >= 12:
            parts.append(f'<text class="lbl" x="{left + a * cw + 3:.1f}" y="{y + 10.5:.1f}">'
                         f'%{k} {_e(n.op)}</text>')
    step = max(1, cols // 20)
    for i in range(0, cols, step):
        label = "commit" if i == end else f"k{i}"
        parts.append(f'<text x="{left + (i + 0.5) * cw:.1f}" y="{top + h + 14}" '
                     f'class="ax" text-anchor="middle">{label}</text>')
    for frac in (0.0, 0.5, 1.0):
        parts.append(f'<text x="{left - 6}" y="{top + h - frac * h + 4:.1f}" class="ax" '
                     f'text-anchor="end">{int(total * frac)} B</text>')
    parts.append(f'<text x="{left + w / 2:.0f}" y="{top + h + 32}" class="ax" '
                 f'text-anchor="middle">kernels in execution order \u2192</text></svg>')
    return "\n".join(parts)


def _profile_bars(exe: Any, p: Any) -> str:
    if not hasattr(exe, "profile"):
        return '<p class="note">This backend has no profiler.</p>'
    if not getattr(exe, "profiling", False):
        return ('<p class="note">Not a profiling build. Compile the step with '
                '<code>GRAPHC_PROFILE=1</code> in the environment and call it to see each '
                "kernel's share of the step here.</p>")
    rows = exe.profile()
    total, calls = sum(t for _, t, _ in rows), max((c for _, _, c in rows), default=0)
    if not total:
        return '<p class="note">Profiling build, but the step has not run yet.</p>'
    units = p.units() if p is not None else []
    first = {i: p.node_index[u[0].id] for i, u in enumerate(units)} if p is not None else {}
    out = [f'<p class="note">{calls} calls, {total / max(calls, 1):.0f} time-stamp ticks a '
           "call; each bar is a kernel's share of the native time.</p><div class=\"bars\">"]
    order = sorted(range(len(rows)), key=lambda i: -rows[i][1])
    for i in order:
        name, t, c = rows[i]
        share = 100 * t / total
        dn = f' data-n="{first[i]}"' if i in first else ""
        out.append(f'<div class="bar"{dn}><span class="bn">{_e(name)}</span>'
                   f'<span class="bt"><span class="bf" style="width:{share:.2f}%"></span>'
                   f'</span><span class="bv">{share:.1f}% \u00b7 {t / max(c, 1):.0f}'
                   "</span></div>")
    out.append("</div>")
    return "\n".join(out)


# -- the page ----------------------------------------------------------------------------

def build_page(fn: Any, stages: str | Sequence[str] | None = None) -> str:
    """The HTML page for the compiled function ``fn`` (its most recent variant)."""
    v = _variant(fn)
    names = pick_stages(fn, stages)
    locs = _Locs()
    p = _plan(v.exe)
    kernels = _kernels_of(p) if p is not None else {}
    graphs, texts = [], []
    for s in names:
        val = _stage(v, s)
        if _is_graph(val):
            graphs.append(f'<section class="stage" data-stage="{_e(s)}"><h3>{_e(s)}</h3>'
                          f'{_graph_rows(val, s, locs, kernels)}</section>')
        else:
            lines = str(val).splitlines()
            cut = (f"\n\u2026 {len(lines) - TEXT_STAGE_MAX_LINES} more lines (see "
                   f"step.ir({s!r}))" if len(lines) > TEXT_STAGE_MAX_LINES else "")
            texts.append(f'<details class="txt"><summary>{_e(s)} ({len(lines)} lines)'
                         f'</summary><pre>{_e(chr(10).join(lines[:TEXT_STAGE_MAX_LINES]))}'
                         f'{_e(cut)}</pre></details>')
    env = dict(getattr(v.sig, "example_env", {}) or {})
    at = ", ".join(f"{k}={val}" for k, val in env.items())
    g = v.graph
    if p is not None:
        plan = _plan_table(p, g, env)
        arena = (f'<p class="note">Byte offsets evaluated at {_e(at or "the traced shapes")}; '
                 "hover a block for its node, bytes and lifetime, click it to find the node."
                 "</p>" + _arena_svg(p, env))
    else:
        plan = arena = (f'<p class="note">The {_e(getattr(fn, "backend_name", "?"))} backend '
                        "has no kernel plan.</p>")
    memory = v.exe.memory_report() if hasattr(v.exe, "memory_report") else ""
    n_kernels = f"{len(p.units())} kernels, " if p is not None else ""
    head = (f"{_e(fn.name)}: backend {_e(getattr(fn, 'backend_name', '?'))}, {n_kernels}"
            f"{len(fn.variants)} variant(s); stages {_e(', '.join(v.stages))}")
    page = _PAGE.format(
        title=_e(f"graphc: {fn.name}"), name=_e(fn.name), head=head,
        memory=f"<pre class=\"mem\">{_e(memory)}</pre>" if memory else "",
        stages="\n".join(graphs) or '<p class="note">No IR graph stage selected.</p>',
        source=_source_pane(locs), texts="\n".join(texts), plan=plan, arena=arena,
        profile=_profile_bars(v.exe, p), css=_CSS, js=_JS, marker=MARKER)
    # ASCII with character references: the page reads right whatever encoding a tool assumes
    return page.encode("ascii", "xmlcharrefreplace").decode("ascii")


def write_page(fn: Any, path: str | os.PathLike[str],
               stages: str | Sequence[str] | None = None) -> str:
    """Write the page to ``path`` (UTF-8) and return the path as a string."""
    text = build_page(fn, stages)
    Path(path).write_text(text, encoding="utf-8")
    return str(path)


_CSS = """
body{font:14px system-ui,sans-serif;margin:0 16px 40px;color:#222;background:#fafafa}
h1{font-size:20px;margin:14px 0 4px}h2{font-size:16px;margin:22px 0 6px}
h3{display:none}.note{color:#555;margin:4px 0}
code,pre,.ir,.src,table.plan{font-family:ui-monospace,Menlo,Consolas,"DejaVu Sans Mono",monospace;
font-size:12px}
pre.mem{color:#555;white-space:pre-wrap;overflow-wrap:anywhere;margin:4px 0}
#tabs button{margin-right:4px;padding:3px 10px;border:1px solid #aaa;background:#eee;cursor:pointer}
#tabs button.on{background:#246;color:#fff}
.split{display:flex;gap:12px;align-items:flex-start}
.ir,.src{background:#fff;border:1px solid #ccc;overflow:auto;max-height:560px;position:relative}
.ir{flex:3;min-width:0}.src{flex:2;min-width:0}
.stage h3{display:block;font-size:13px;margin:6px 0 2px}.js .stage h3{display:none}
.r{white-space:pre;padding:0 6px;line-height:17px}.n{cursor:pointer}.n:hover{background:#eef}
.c{display:inline-block;min-width:50%}.loc{color:#888;margin-left:12px}.st{color:#475;margin-left:8px}
.kb{background:#dde7f5;border-radius:3px;padding:0 3px;margin-left:6px;color:#246}
.fh{background:#eee;padding:2px 6px;font-weight:bold;position:sticky;top:0}
.sl{white-space:pre;padding:0 6px;line-height:17px;color:#888}.sl.hot{color:#111;cursor:pointer}
.ln{display:inline-block;width:40px;color:#aaa;text-align:right;margin-right:10px}
.gap{color:#aaa;padding-left:20px}
.hl,.sl.hl,tr.hl td{background:#ffe27a !important}.hl2{background:#fff4c2}
table.plan{border-collapse:collapse;background:#fff;width:100%}
table.plan td,table.plan th{border:1px solid #ddd;padding:2px 5px;vertical-align:top;
text-align:left;overflow-wrap:anywhere}
tr.gh td{background:#eef5ea;color:#363;font-weight:bold}
tr.grp td:first-child{border-left:4px solid #7a6}
table.plan th,table.plan td:first-child,table.plan td:last-child{white-space:nowrap;
overflow-wrap:normal}table.plan td:nth-child(2){min-width:190px}
.ir.sbs{display:flex;align-items:flex-start}.ir.sbs section.stage{flex:1;min-width:0;
overflow-x:auto;border-right:1px solid #ccc}.js .ir.sbs .stage h3{display:block;padding:0 6px}
.ir.sbs .loc,.ir.sbs .st,.ir.sbs .kb{display:none}
tr.k{cursor:pointer}a.nref{color:#246;text-decoration:none}.in{color:#a52}
svg.arena{background:#fff;border:1px solid #ccc}svg .bg{fill:#f4f4f4}
svg .work{fill:#d8d8d8}svg .buf{stroke:#333;stroke-width:.5;cursor:pointer}
svg .buf.hl{stroke:#d00;stroke-width:2}svg .ax{font-size:10px;fill:#555}
svg .lbl{font-size:10px;fill:#222;pointer-events:none}
.bars{background:#fff;border:1px solid #ccc;padding:6px;max-width:1100px}
.bar{display:flex;align-items:center;gap:8px;cursor:pointer;line-height:18px}
.bn{width:260px;font-family:monospace;font-size:12px;overflow:hidden;white-space:nowrap}
.bt{flex:1;background:#f0f0f0;height:12px}.bf{display:block;height:12px;background:#4a7fc1}
.bv{width:140px;font-size:12px;color:#444}details.txt pre{max-height:500px;overflow:auto;
background:#fff;border:1px solid #ccc;padding:6px}
"""

_JS = r"""
(function () {
  var root = document.documentElement;
  try {
    root.classList.add("js");
    var stages = Array.prototype.slice.call(document.querySelectorAll("section.stage"));
    var tabs = document.getElementById("tabs");
    var pane = document.querySelector(".split .ir");
    function show(name) {  // one stage, or "*": every stage side by side
      stages.forEach(function (s) { s.hidden = name !== "*" && s.dataset.stage !== name; });
      pane.classList.toggle("sbs", name === "*");
      tabs.querySelectorAll("button").forEach(function (b) {
        b.classList.toggle("on", b.dataset.stage === name); });
    }
    function tab(label, name) {
      var b = document.createElement("button");
      b.textContent = label; b.dataset.stage = name;
      b.addEventListener("click", function () { show(name); });
      tabs.appendChild(b);
    }
    stages.forEach(function (s) { tab(s.dataset.stage, s.dataset.stage); });
    if (stages.length > 1) tab("side by side", "*");
    var names = stages.map(function (s) { return s.dataset.stage; });
    if (names.length) show(names.indexOf("optimized") >= 0 ? "optimized" : names[0]);
    function clear() {
      document.querySelectorAll(".hl,.hl2").forEach(function (e) {
        e.classList.remove("hl"); e.classList.remove("hl2"); });
    }
    function reveal(el) {  // scroll el's own scrolling pane, not the page
      var pane = el && el.closest(".ir,.src");
      if (pane) pane.scrollTop = el.offsetTop - pane.clientHeight / 2;
    }
    function byLoc(loc, scope) {
      return loc ? (scope || document).querySelectorAll('.n[data-loc="' + loc + '"]') : [];
    }
    function pickNode(row) {
      clear();
      var loc = row.dataset.loc, stage = row.closest("section.stage");
      byLoc(loc, stage).forEach(function (e) { e.classList.add("hl2"); });
      row.classList.add("hl");
      var src = loc && document.getElementById("src-" + loc);
      if (src) { src.classList.add("hl"); reveal(src); }
      if (stage && stage.dataset.stage === "optimized") {
        document.querySelectorAll('[data-n="' + row.dataset.n + '"]').forEach(function (e) {
          if (e.matches("tr.k,rect.buf,.bar")) e.classList.add("hl"); });
      }
    }
    function pickOptimized(n) {
      if (names.indexOf("optimized") < 0) return;
      show("optimized");
      var row = document.getElementById("n-optimized-" + n);
      if (row) { pickNode(row); reveal(row); }
    }
    document.addEventListener("click", function (ev) {
      var t = ev.target;
      var row = t.closest(".n"), src = t.closest(".sl.hot"), ref = t.closest("[data-n]");
      if (row) { pickNode(row); return; }
      if (src) {
        clear(); src.classList.add("hl");
        stages.filter(function (s) { return !s.hidden; }).forEach(function (s) {
          var hits = byLoc(src.dataset.loc, s);
          hits.forEach(function (e) { e.classList.add("hl"); });
          if (hits.length) reveal(hits[0]);
        });
        return;
      }
      if (ref) { ev.preventDefault(); pickOptimized(ref.dataset.n); }
    });
    root.setAttribute("data-graphc-explain", "ok");
  } catch (err) {
    root.setAttribute("data-graphc-explain", "error: " + err);
    throw err;
  }
})();
"""

_PAGE = """<!DOCTYPE html>
<html lang="en" {marker}="no-script">
<head><meta charset="utf-8"><title>{title}</title>
<style>{css}</style></head>
<body>
<h1>{name}</h1>
<p class="note">{head}</p>
{memory}
<h2 id="ir">IR by stage, next to the source lines that produced it</h2>
<p class="note">Click a node to find its source line (and, in the optimized stage, its
kernel); click a highlighted source line to find its nodes. <code>k</code> badges name the
kernels that compute a node.</p>
<div id="tabs"></div>
<div class="split"><div class="ir">{stages}</div><div class="src">{source}</div></div>
{texts}
<h2 id="plan">Kernel plan: which nodes fused into which loop</h2>
{plan}
<h2 id="arena">Scratch arena over time</h2>
{arena}
<h2 id="profile">Where the step's time goes</h2>
{profile}
<script>{js}</script>
</body></html>
"""
