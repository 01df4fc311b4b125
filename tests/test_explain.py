"""``step.explain()`` and ``graphc dump --format html``: the one-file HTML picture of a step.

The page is checked twice: as text (it parses, holds every stage, every node's source line,
the arena drawing and the profile bars, escapes what it shows and reaches for nothing on the
network) and in a real browser: headless Chromium loads it, its script must run to the end
(it sets ``data-graphc-explain="ok"`` on ``<html>``) with nothing on the console, clicking a
node must highlight its source line, and screenshots are kept as CI artifacts under
``$GRAPHC_ARTIFACTS`` (default ``tests/artifacts/``). Without Chromium the browser tests skip.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from html import escape
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

import graphc as gc
from graphc import cli, explain, nn, optim
from graphc.ir.text import format_graph

ARTIFACTS = Path(os.environ.get("GRAPHC_ARTIFACTS") or Path(__file__).parent / "artifacts")
VOID = {"meta", "br", "hr", "img", "input", "link", "wbr", "col", "source", "area", "base",
        "rect", "path", "line", "circle"}  # rect/line...: SVG elements written self-closed
URL_ATTRS = {"src", "href", "xlink:href", "action", "poster", "data", "srcset", "formaction"}


def _make_step(profile: bool, backend: str | None = None) -> gc.CompiledFunction:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    x = np.random.rand(16, 4).astype(np.float32)
    y = (np.arange(16) % 3).astype(np.int64)

    def train_step(x, y):
        opt.zero_grad()
        loss = loss_fn(model(x), y)  # <b>&"escaped"</b>
        loss.backward()
        opt.step()
        return loss

    with pytest.MonkeyPatch.context() as mp:
        if profile:
            mp.setenv("GRAPHC_PROFILE", "1")
        else:
            mp.delenv("GRAPHC_PROFILE", raising=False)
        step = gc.compile(train_step, example_args=(x, y), backend=backend)
    if backend is None:
        for _ in range(3):
            step(x, y)
    return step


@pytest.fixture(scope="module")
def step() -> gc.CompiledFunction:
    """A native, profiling build of a small MLP step (matmuls, loop groups), run 3 times."""
    return _make_step(profile=True)


@pytest.fixture(scope="module")
def page(step: gc.CompiledFunction) -> str:
    return step.explain()


class _Check(HTMLParser):
    """Tag balance, every URL-bearing attribute, and whether the page links anything in."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.urls: list[str] = []
        self.tags: dict[str, int] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] = self.tags.get(tag, 0) + 1
        self.urls += [v or "" for k, v in attrs if k in URL_ATTRS]
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] = self.tags.get(tag, 0) + 1
        self.urls += [v or "" for k, v in attrs if k in URL_ATTRS]

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
            return
        self.stack.pop()


def _parse(text: str) -> _Check:
    p = _Check()
    p.feed(text)
    p.close()
    return p


def test_page_parses_and_reaches_for_nothing(page: str) -> None:
    p = _parse(page)
    assert not p.errors, p.errors[:5]
    assert p.stack == [], p.stack
    assert page.startswith("<!DOCTYPE html>")
    for url in p.urls:  # only links within the page
        assert url.startswith("#"), url
    assert "http://" not in page and "https://" not in page
    assert not re.search(r"""(src|href)\s*=\s*["']?//""", page)
    assert not re.search(r"@import|url\(", page)
    assert p.tags.get("link", 0) == 0 and p.tags.get("iframe", 0) == 0
    assert p.tags.get("script") == 1  # the page's own inline script, nothing loaded
    assert re.search(r"<script\s+src", page) is None
    assert page.isascii()


def test_every_stage_and_every_nodes_source_line(step: gc.CompiledFunction, page: str) -> None:
    v = step._last
    graph_stages = [s for s, g in v.stages.items() if hasattr(g, "nodes")]
    assert {"traced", "grad", "optimized"} <= set(graph_stages)
    for s in graph_stages:
        assert f'data-stage="{s}"' in page
        g = v.stages[s]
        # every line of the printed graph is on the page (escaped)
        for line in format_graph(g).splitlines():
            assert escape(line, quote=True) in page, (s, line)
        for n in g.nodes():
            if n.op == "input" or not n.loc:
                continue
            path, _, line = n.loc.rpartition(":")
            text = Path(path).read_text().splitlines()[int(line) - 1].strip()
            assert escape(text, quote=True) in page, (s, n.loc)
            assert f"{Path(path).name}:{line}" in page
    # the user's text is escaped, never markup
    assert "&lt;b&gt;&amp;&quot;escaped&quot;&lt;/b&gt;" in page
    assert "<b>&" not in page
    # a node row links to its source line by a shared id
    m = re.search(r'class="r n" id="n-optimized-(\d+)" data-n="\d+" data-loc="(L\d+)"', page)
    assert m is not None
    assert f'id="src-{m.group(2)}"' in page


def test_all_stages_include_the_native_text(step: gc.CompiledFunction) -> None:
    full = step.explain(stages="all")
    for s in step.stages:
        assert f'data-stage="{s}"' in full or f"<summary>{s} (" in full, s
    with pytest.raises(ValueError, match="no stage 'nosuch'"):
        step.explain(stages=["nosuch"])


def test_kernel_plan_arena_and_profile(step: gc.CompiledFunction, page: str) -> None:
    p = step._last.exe.lowering.plan
    for i, n in enumerate(p.materialized):  # one plan row per kernel, naming its node
        assert f'id="k{i}" data-k="{i}" data-n="{p.node_index[n.id]}"' in page
    assert page.count('class="gh"') == len(p.groups) >= 1  # loop group headers
    svg = page[page.index('<svg class="arena"'):page.index("</svg>") + 6]
    blocks = re.findall(r'<rect class="buf" data-n="(\d+)"', svg)
    in_arena = [n for n in p.materialized if n.id in p.offsets]
    assert len(blocks) == len(in_arena) > 0
    assert sorted(map(int, blocks)) == sorted(p.node_index[n.id] for n in in_arena)
    assert '<rect class="work"' in svg  # the GEMM packing workspace
    assert _parse(svg).stack == []
    bars = re.findall(r'class="bf" style="width:([0-9.]+)%"', page)
    assert len(bars) == len(p.units())
    assert abs(sum(map(float, bars)) - 100) < 1.0


def test_explain_writes_the_same_page(step: gc.CompiledFunction, page: str,
                                      tmp_path: Path) -> None:
    out = tmp_path / "step.html"
    assert step.explain(str(out)) == str(out)
    assert out.read_text(encoding="ascii") == page


def test_without_a_plan_or_profile() -> None:
    s = _make_step(profile=False, backend="interp")
    text = s.explain()
    assert not _parse(text).errors
    assert "has no kernel plan" in text and "This backend has no profiler" in text
    with pytest.raises(RuntimeError, match="not been compiled"):
        gc.compile(lambda x: x).explain()


SCRIPT = """\
import numpy as np
import graphc as gc
from graphc import nn, optim

model = nn.Linear(1, 1)
opt = optim.SGD(model.parameters(), lr=0.01)
loss_fn = nn.L1Loss()
X = np.arange(0, 1, 0.02, dtype=np.float32)[:, None]
Y = 0.7 * X + 0.3


@gc.compile(example_args=(X, Y))
def train_step(x, y):
    opt.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    return loss
"""


def test_cli_dump_html(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GRAPHC_PROFILE", raising=False)
    script = tmp_path / "linreg.py"
    script.write_text(SCRIPT)
    out = tmp_path / "step.html"
    assert cli.main(["dump", f"{script}:train_step", "-o", str(out)]) == 0  # by suffix
    text = out.read_text()
    assert not _parse(text).errors
    for s in ("traced", "grad", "optimized"):
        assert f'data-stage="{s}"' in text
    assert "loss = loss_fn(model(x), y)" in text and '<svg class="arena"' in text
    assert "Not a profiling build" in text and "GRAPHC_PROFILE=1" in text
    capsys.readouterr()
    assert cli.main(["dump", f"{script}:train_step", "--format", "html", "--stage", "fused"]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith("<!DOCTYPE html>") and "<summary>fused (" in shown
    with pytest.raises(SystemExit) as e:
        cli.main(["dump", f"{script}:train_step", "--format", "html", "--stats"])
    assert e.value.code == 2
    assert "drop --format html" in capsys.readouterr().err


# -- in a real browser ---------------------------------------------------------------------

def _chromium() -> str | None:
    for name in (os.environ.get("GRAPHC_CHROMIUM"), "chromium", "chromium-browser",
                 "google-chrome", "google-chrome-stable"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _browse(exe: str, url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """One headless Chromium run with a throwaway profile and no network."""
    with tempfile.TemporaryDirectory() as profile:
        cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu",
               "--disable-background-networking", "--disable-component-update",
               "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
               "--host-resolver-rules=MAP * ~NOTFOUND", "--enable-logging=stderr", "--v=0",
               *extra, url]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def _console(stderr: str) -> list[str]:
    """What the page wrote to the console (Chromium logs it as ``...:CONSOLE...] "msg"``):
    the page itself logs nothing, so every such line is an error or a failed load."""
    return [ln for ln in stderr.splitlines() if ":CONSOLE" in ln]


@pytest.fixture(scope="module")
def browser() -> str:
    exe = _chromium()
    if exe is None:
        pytest.skip("headless Chromium is not installed (Debian: apt-get install chromium; "
                    "or set GRAPHC_CHROMIUM)")
    return exe


@pytest.mark.slow
def test_page_runs_in_chromium(browser: str, page: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    html_path = ARTIFACTS / "explain_step.html"
    html_path.write_text(page, encoding="ascii")
    url = html_path.resolve().as_uri()
    run = _browse(browser, url, "--dump-dom")
    assert run.returncode == 0, run.stderr[-2000:]
    assert _console(run.stderr) == []
    assert f'{explain.MARKER}="ok"' in run.stdout, run.stdout[:500]
    shot = ARTIFACTS / "explain_step.png"
    full = ARTIFACTS / "explain_step_full.png"
    for path, size in ((shot, "1400,1000"), (full, "1400,3000")):
        path.unlink(missing_ok=True)
        run = _browse(browser, url, f"--screenshot={path}", f"--window-size={size}")
        assert run.returncode == 0, run.stderr[-2000:]
        assert _console(run.stderr) == []
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


# Clicks a node row of the optimized stage, then a source line, then an arena block, and
# records what the page highlighted; the test reads the record back from the dumped DOM.
CLICKS = """<script>
(function () {
  var out = [];
  var row = document.querySelector('#n-optimized-1');
  row.click();
  out.push('node:' + document.querySelectorAll('.sl.hl').length);
  out.push('kernel:' + document.querySelectorAll('tr.k.hl').length);
  document.querySelector('.sl.hot').click();
  out.push('source:' + document.querySelectorAll('.n.hl').length);
  var tab = document.querySelector('#tabs button');
  tab.click();
  out.push('tab:' + document.querySelectorAll('section.stage:not([hidden])').length);
  var buttons = document.querySelectorAll('#tabs button');
  buttons[buttons.length - 1].click();
  out.push('sbs:' + document.querySelectorAll('.sbs section.stage:not([hidden])').length);
  document.querySelector('rect.buf').dispatchEvent(new MouseEvent('click', {bubbles: true}));
  out.push('arena:' + document.querySelectorAll('.n.hl').length);
  document.documentElement.setAttribute('data-clicks', out.join(' '));
})();
</script></body>"""


@pytest.mark.slow
def test_page_links_nodes_sources_and_kernels(browser: str, page: str,
                                              tmp_path: Path) -> None:
    path = tmp_path / "clicks.html"
    path.write_text(page.replace("</body>", CLICKS), encoding="ascii")
    run = _browse(browser, path.as_uri(), "--dump-dom")
    assert _console(run.stderr) == []
    m = re.search(r'data-clicks="([^"]*)"', run.stdout)
    assert m is not None, run.stdout[:500]
    got = dict(item.split(":") for item in m.group(1).split())
    assert got["node"] == "1"  # the node's source line lit up
    assert int(got["kernel"]) >= 1  # and the kernel computing it
    assert int(got["source"]) >= 1  # a source line lights its nodes
    assert got["tab"] == "1"  # one stage shown at a time
    assert got["sbs"] == str(page.count('<section class="stage"'))  # or all side by side
    assert got["arena"] == "1"  # an arena block finds its node in the optimized stage
