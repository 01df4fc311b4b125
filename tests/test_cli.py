"""The ``graphc`` command line: ``dump`` (text, dot, stats), ``aot`` wiring, and its errors.

Scripts are written into ``tmp_path`` and compiled with ``backend="interp"`` so these tests do
not depend on the native backend; one test uses the default backend and accepts whatever stages
it provides.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

import graphc
from graphc import cli

PRELUDE = """\
import numpy as np
import graphc as gc
from graphc import nn, optim

gc.manual_seed(42)
model = nn.Linear(1, 1)
opt = optim.SGD(model.parameters(), lr=0.01{momentum})
loss_fn = nn.L1Loss()
X = np.arange(0, 1, 0.02, dtype=np.float32)[:, None]
Y = 0.7 * X + 0.3
"""

# the step every script below trains with (zero_grad, forward, loss, backward, step)
STEP_BODY = """\
    opt.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    return loss
"""


def step_def(head: str, indent: str = "") -> str:
    """Source of a step function: ``head`` (its decorator and ``def`` lines), then the body."""
    return textwrap.indent(head + "\n" + STEP_BODY, indent)


STEP = step_def("""\
@gc.compile(example_args=(X, Y){backend})
def train_step(x, y):""") + """

def plain(x, y):
    return x


@gc.compile(backend="interp")
def untraced(x, y):
    return loss_fn(model(x), y)


if __name__ == "__main__":
    raise SystemExit("the training loop must not run when the script is dumped")
"""


def write_script(tmp_path: Path, name: str = "linreg_step.py", *, momentum: bool = False,
                 backend: str | None = "interp", extra: str = "") -> Path:
    src = PRELUDE.format(momentum=", momentum=0.9" if momentum else "")
    src += "\n\n" + STEP.format(backend=f", backend={backend!r}" if backend else "") + extra
    path = tmp_path / name
    path.write_text(src)
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def assert_one_line_error(err: str, *needles: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("graphc: error: "), err
    for n in needles:
        assert n in lines[0], (n, err)


def dot_is_balanced(text: str) -> bool:
    """Braces outside double-quoted strings balance (labels may contain anything)."""
    depth, in_str, esc = 0, False, False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0 and not in_str


@pytest.fixture
def script(tmp_path: Path) -> Path:
    return write_script(tmp_path)


# -- help ------------------------------------------------------------------------------------

def test_help_lists_commands(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "dump" in out and "aot" in out


@pytest.mark.parametrize("command", ["dump", "aot"])
def test_every_command_has_help(capsys, command):
    with pytest.raises(SystemExit) as e:
        cli.main([command, "--help"])
    assert e.value.code == 0
    assert "SCRIPT.py:FUNC" in capsys.readouterr().out


def test_no_command_prints_usage(capsys):
    rc, out, _ = run(capsys)
    assert rc == 2 and "dump" in out


def test_python_dash_m_help():
    root = str(Path(graphc.__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-m", "graphc", "--help"], capture_output=True,
                          text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "dump" in proc.stdout and "aot" in proc.stdout


# -- dump: text --------------------------------------------------------------------------------

def test_dump_default_stage_is_optimized(capsys, script):
    rc, out, err = run(capsys, "dump", f"{script}:train_step")
    assert rc == 0, err
    assert out.startswith("graph train_step(x: f32[B,1], y: f32[B,1])")
    assert "update model.weight <-" in out
    rc, explicit, err = run(capsys, "dump", f"{script}:train_step", "--stage", "optimized")
    assert rc == 0, err
    assert out == explicit


@pytest.mark.parametrize("stage", ["traced", "grad", "optimized"])
def test_dump_each_stage(capsys, script, stage):
    rc, out, err = run(capsys, "dump", f"{script}:train_step", "--stage", stage)
    assert rc == 0, err
    assert out.startswith("graph train_step(")
    if stage == "traced":
        assert "update " not in out  # forward only
    else:
        assert "update model.weight.grad <-" in out


def test_dump_all_has_a_header_per_stage(capsys, script):
    rc, out, err = run(capsys, "dump", f"{script}:train_step", "--stage", "all")
    assert rc == 0, err
    headers = re.findall(r"^==== (\w+) ====$", out, re.M)
    assert headers == ["traced", "grad", "optimized"]
    assert out.count("graph train_step(") == 3


def test_dump_does_not_run_the_training_loop(capsys, script):
    # the script raises SystemExit under `if __name__ == "__main__":`
    rc, _, err = run(capsys, "dump", f"{script}:train_step")
    assert rc == 0, err


def test_dump_writes_output_file(capsys, script, tmp_path):
    target = tmp_path / "step.txt"
    rc, out, err = run(capsys, "dump", f"{script}:train_step", "-o", str(target))
    assert rc == 0, err
    assert out == ""
    assert target.read_text().startswith("graph train_step(")


def test_dump_restores_sys_path_and_modules(capsys, script):
    before_path, before_mods = list(sys.path), set(sys.modules)
    rc, _, err = run(capsys, "dump", f"{script}:train_step")
    assert rc == 0, err
    assert sys.path == before_path
    assert "linreg_step" not in sys.modules and "linreg_step" not in before_mods


def test_script_can_import_its_neighbours(capsys, tmp_path):
    (tmp_path / "helper_consts.py").write_text("LR = 0.05\n")
    script = write_script(tmp_path, extra="\nimport helper_consts  # noqa: E402\n")
    rc, _, err = run(capsys, "dump", f"{script}:train_step")
    sys.modules.pop("helper_consts", None)
    assert rc == 0, err


# -- dump: dot ---------------------------------------------------------------------------------

def test_dot_output_is_a_digraph_with_clusters(capsys, script):
    rc, out, err = run(capsys, "dump", f"{script}:train_step", "--format", "dot")
    assert rc == 0, err
    assert out.startswith("digraph ")
    assert dot_is_balanced(out)
    for cluster in ("cluster_forward", "cluster_grad", "cluster_update"):
        assert f"subgraph {cluster}" in out
    assert "shape=invhouse" in out  # args
    assert "shape=box3d" in out  # params
    assert "shape=diamond" in out  # hyperparameters
    assert '"update model.weight"' in out and '"return 0"' in out


def test_dot_output_is_deterministic(capsys, script):
    _, first, _ = run(capsys, "dump", f"{script}:train_step", "--format", "dot")
    _, second, _ = run(capsys, "dump", f"{script}:train_step", "--format", "dot")
    assert first == second


def test_dot_classifies_forward_grad_and_update_nodes(script):
    from graphc.dotgraph import classify, slot_kind

    step = _load(script)
    g = step.variants[-1].stages["optimized"]
    classes = classify(g)
    outputs = {o.id for o in g.outputs}
    assert all(classes[i] == "forward" for i in outputs)
    slots = dict(g.updates)
    assert classes[slots["model.weight"].id] == "update"
    assert classes[slots["model.weight.grad"].id] == "grad"
    assert slot_kind(g, "model.weight") == "param"
    assert slot_kind(g, "model.weight.grad") == "grad"
    forward_only = classify(step.variants[-1].stages["traced"])
    assert set(forward_only.values()) == {"forward"}


def _load(script: Path):
    with cli.loaded_step(str(script), "train_step") as step:
        return step


def test_dot_with_momentum_draws_optimizer_state(capsys, tmp_path):
    script = write_script(tmp_path, "momentum_step.py", momentum=True)
    rc, out, err = run(capsys, "dump", f"{script}:train_step", "--format", "dot")
    assert rc == 0, err
    assert "shape=cylinder" in out  # optimizer state
    assert "momentum_buffer" in out


@pytest.mark.parametrize("stage", ["traced", "grad", "optimized", "all"])
def test_dot_renders_with_graphviz_when_installed(capsys, script, stage):
    rc, out, err = run(capsys, "dump", f"{script}:train_step", "--format", "dot",
                       "--stage", stage)
    assert rc == 0, err
    assert out.count("digraph ") == (3 if stage == "all" else 1)
    if shutil.which("dot") is None:
        pytest.skip("Graphviz dot is not installed")
    proc = subprocess.run(["dot", "-Tsvg"], input=out, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "<svg" in proc.stdout


def test_dot_file_is_written_not_rendered(capsys, script, tmp_path):
    target = tmp_path / "step.dot"
    rc, _, err = run(capsys, "dump", f"{script}:train_step", "-o", str(target))
    assert rc == 0, err
    assert target.read_text().startswith("digraph ")  # .dot implies --format dot


def test_svg_output_is_rendered(capsys, script, tmp_path):
    if shutil.which("dot") is None:
        pytest.skip("Graphviz dot is not installed")
    target = tmp_path / "step.svg"
    rc, _, err = run(capsys, "dump", f"{script}:train_step", "-o", str(target))
    assert rc == 0, err
    assert "<svg" in target.read_text()


def test_one_image_holds_one_stage(capsys, script, tmp_path):
    rc, _, err = run(capsys, "dump", f"{script}:train_step", "--stage", "all", "-o",
                     str(tmp_path / "all.svg"))
    assert rc == 1
    assert_one_line_error(err, "one stage")


def test_svg_without_graphviz_is_one_line_with_install_hint(capsys, script, tmp_path,
                                                           monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None)
    target = tmp_path / "step.png"
    rc, _, err = run(capsys, "dump", f"{script}:train_step", "--format", "dot", "-o",
                     str(target))
    assert rc == 1
    assert_one_line_error(err, "Graphviz", "apt install graphviz", "pip install")
    assert not target.exists()


# -- dump: stats -------------------------------------------------------------------------------

def test_stats_counts_every_stage(capsys, script):
    rc, out, err = run(capsys, "dump", f"{script}:train_step", "--stats")
    assert rc == 0, err
    for stage in ("traced", "grad", "optimized"):
        assert re.search(rf"^stage {stage}: \d+ nodes$", out, re.M), out
    assert re.search(r"ops: .*matmul \d+", out)
    assert "inputs: arg 2, param 2, hyper 1" in out
    assert "update slots: 4 (param 2, grad 2)" in out
    assert "arg 8*B" in out  # symbolic: two f32[B,1] arguments
    assert re.search(r"state buffer bytes \(.*\): 8$", out, re.M)  # f32[1,1] + f32[1]


def test_stats_with_momentum_counts_state_bytes(capsys, tmp_path):
    script = write_script(tmp_path, "momentum_stats.py", momentum=True)
    rc, out, err = run(capsys, "dump", f"{script}:train_step", "--stats", "--stage",
                       "optimized")
    assert rc == 0, err
    assert "stage traced" not in out
    assert "update slots: 6 (param 2, grad 2, state 2)" in out
    # params 8 bytes + momentum buffers 8 bytes + one bool flag: the optimizer's state exists
    assert re.search(r"state buffer bytes \(.*\): 17$", out, re.M), out


# -- stages a backend adds as text -------------------------------------------------------------

TEXT_STAGE = """
# stand-ins for a native backend's text stages: one plain, one rendered lazily on first use
train_step.variants[-1].stages["asm"] = lambda: "step:\\n  ret\\n"
train_step.variants[-1].stages["llvm"] = "define void @step() {\\n  ret void\\n}\\n"
"""


def test_text_stages_dump_and_refuse_dot(capsys, tmp_path):
    script = write_script(tmp_path, "with_asm.py", extra=TEXT_STAGE)
    rc, out, err = run(capsys, "dump", f"{script}:train_step", "--stage", "asm")
    assert rc == 0, err
    assert out == "step:\n  ret\n"
    rc, out, err = run(capsys, "dump", f"{script}:train_step", "--stage", "all")
    assert rc == 0, err
    assert re.findall(r"^==== (\w+) ====$", out, re.M) == ["traced", "grad", "optimized", "asm",
                                                                 "llvm"]
    rc, out, err = run(capsys, "dump", f"{script}:train_step", "--stats")
    assert rc == 0 and "stage asm: text, 2 lines" in out and "stage llvm: text, 3 lines" in out
    rc, out, err = run(capsys, "dump", f"{script}:train_step", "--stage", "llvm")
    assert rc == 0 and out.startswith("define void @step()")
    rc, out, err = run(capsys, "dump", f"{script}:train_step", "--stage", "asm", "--format",
                       "dot")
    assert rc == 1
    assert_one_line_error(err, "'asm'", "text")
    rc, out, err = run(capsys, "dump", f"{script}:train_step", "--stage", "all", "--format",
                       "dot")
    assert rc == 0 and out.count("digraph ") == 3


def test_default_backend_dumps_whatever_stages_it_has(capsys, tmp_path):
    try:
        importlib.import_module("graphc.codegen.cpu")
    except ImportError:
        pytest.skip("the native CPU backend is not available in this build")
    script = write_script(tmp_path, "native_step.py", backend=None)
    rc, out, err = run(capsys, "dump", f"{script}:train_step", "--stage", "all")
    if rc == 1 and "while being imported" in err:
        # the backend's own tests cover compiling; here only the dump of what it produced
        pytest.skip(f"the native backend could not compile the step: {err.strip()}")
    assert rc == 0, err
    stages = re.findall(r"^==== (\w+) ====$", out, re.M)
    assert {"traced", "grad", "optimized"} <= set(stages)
    for stage in stages:
        rc, out, err = run(capsys, "dump", f"{script}:train_step", "--stage", stage)
        assert rc == 0, (stage, err)
        assert out.strip(), stage
        assert "<function" not in out, stage  # lazily rendered stages are rendered


# -- errors ----------------------------------------------------------------------------------

def test_missing_file(capsys, tmp_path):
    rc, out, err = run(capsys, "dump", f"{tmp_path / 'nope.py'}:train_step")
    assert rc == 1 and out == ""
    assert_one_line_error(err, "no such file", "nope.py")


def test_missing_function(capsys, script):
    rc, _, err = run(capsys, "dump", f"{script}:no_such_step")
    assert rc == 1
    assert_one_line_error(err, "no_such_step")


def test_not_a_compiled_step(capsys, script):
    rc, _, err = run(capsys, "dump", f"{script}:plain")
    assert rc == 1
    assert_one_line_error(err, "not a compiled step", "example_args")
    rc, _, err = run(capsys, "dump", f"{script}:model")
    assert rc == 1
    assert_one_line_error(err, "Linear", "not a compiled step")


def test_compiled_without_example_args(capsys, script):
    rc, _, err = run(capsys, "dump", f"{script}:untraced")
    assert rc == 1
    assert_one_line_error(err, "without example_args")


def test_script_that_raises(capsys, tmp_path):
    bad = tmp_path / "broken.py"
    bad.write_text("import graphc as gc\n\nraise RuntimeError('no data\\nfound')\n")
    rc, _, err = run(capsys, "dump", f"{bad}:step")
    assert rc == 1
    assert_one_line_error(err, "RuntimeError", "broken.py:3", "no data found")
    assert "Traceback" not in err


def test_script_that_raises_with_debug_shows_traceback(capsys, tmp_path):
    bad = tmp_path / "broken_dbg.py"
    bad.write_text("raise RuntimeError('no data')\n")
    rc, _, err = run(capsys, "dump", f"{bad}:step", "--debug")
    assert rc == 1
    assert "Traceback" in err
    assert err.strip().splitlines()[-1].startswith("graphc: error: ")


def test_script_that_exits(capsys, tmp_path):
    bad = tmp_path / "exits.py"
    bad.write_text("import sys\nsys.exit(3)\n")
    rc, _, err = run(capsys, "dump", f"{bad}:step")
    assert rc == 1
    assert_one_line_error(err, "sys.exit")


def test_unknown_stage(capsys, script):
    rc, _, err = run(capsys, "dump", f"{script}:train_step", "--stage", "llvm")
    assert rc == 1
    assert_one_line_error(err, "'llvm'", "traced, grad, optimized")
    rc, _, err = run(capsys, "dump", f"{script}:train_step", "--stage", "bogus")
    assert rc == 1
    assert_one_line_error(err, "'bogus'")


@pytest.mark.parametrize("argv", [
    ["dump", "script_without_function.py"],
    ["dump", "s.py:f", "--format", "svg"],
    ["aot", "s.py:f"],  # -o DIR is required
    ["frobnicate"],
])
def test_usage_errors_exit_2(capsys, argv):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_image_with_text_format_is_a_usage_error(capsys, script, tmp_path):
    rc, _, err = run(capsys, "dump", f"{script}:train_step", "--format", "text", "-o",
                     str(tmp_path / "x.svg"))
    assert rc == 2
    assert_one_line_error(err, "--format dot")


# -- aot ---------------------------------------------------------------------------------------

def test_aot_unavailable_is_one_line_exit_2(capsys, script, tmp_path, monkeypatch):
    monkeypatch.setattr(cli, "_aot_module", lambda: None)
    rc, _, err = run(capsys, "aot", f"{script}:train_step", "-o", str(tmp_path / "build"))
    assert rc == 2
    assert_one_line_error(err, "ahead-of-time builds are not available in this build")


def fake_aot(build):
    """A stand-in for ``graphc.aot``: the given ``build`` and the real target check."""
    from graphc import aot

    return SimpleNamespace(build=build, check_target=aot.check_target,
                           llvm_catalog=aot.llvm_catalog)


def test_aot_calls_build_with_the_recorded_example_args(capsys, script, tmp_path,
                                                         monkeypatch):
    calls = []

    def build(fn, example_args, out_dir, name, target=None):
        calls.append((fn, example_args, out_dir, name, target))
        Path(out_dir, f"{name}.h").write_text("/* header */\n")

    monkeypatch.setattr(cli, "_aot_module", lambda: fake_aot(build))
    out_dir = tmp_path / "build"
    rc, out, err = run(capsys, "aot", f"{script}:train_step", "-o", str(out_dir))
    assert rc == 0, err
    (fn, example_args, got_dir, name, target), = calls
    assert isinstance(fn, graphc.CompiledFunction)
    assert len(example_args) == 2 and example_args[0].shape == (50, 1)
    assert (got_dir, name, target) == (str(out_dir), "train_step", None)
    assert "train_step.h" in out
    rc, _, err = run(capsys, "aot", f"{script}:train_step", "-o", str(out_dir), "--name",
                     "linreg", "--target", "x86-64")
    assert rc == 0, err
    assert calls[-1][3:] == ("linreg", "x86-64")


def test_aot_build_error_is_one_line(capsys, script, tmp_path, monkeypatch):
    def build(fn, example_args, out_dir, name, target=None):
        raise ValueError("the linker said no to 'x86-64'")

    monkeypatch.setattr(cli, "_aot_module", lambda: fake_aot(build))
    rc, _, err = run(capsys, "aot", f"{script}:train_step", "-o", str(tmp_path / "b"),
                     "--target", "x86-64")
    assert rc == 1
    assert_one_line_error(err, "ValueError", "the linker said no")


def test_aot_module_detection_matches_the_build():
    try:
        has_aot = importlib.util.find_spec("graphc.aot") is not None
    except ImportError:
        has_aot = False
    if not has_aot:
        assert cli._aot_module() is None


# -- finding steps wherever they are defined (issue 20, item 2) ------------------------------

INSIDE_MAIN = """\
import numpy as np
import graphc as gc
from graphc import nn, optim


def main():
    gc.manual_seed(0)
    model = nn.Linear(1, 1)
    opt = optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.L1Loss()
    X = np.arange(0, 1, 0.02, dtype=np.float32)[:, None]
    Y = 0.7 * X + 0.3
    print("loading data")

""" + step_def("""\
@gc.compile(example_args=(X, Y), backend="interp")
def train_step(x, y):""", "    ") + """
    for epoch in range(3):
        print(f"epoch {epoch} loss {float(train_step(X, Y)):.4f}")
    print("training finished")


if __name__ == "__main__":
    main()
"""

TOP_LEVEL_LOOP = PRELUDE.format(momentum="") + """
print("loading data")


""" + step_def("""\
@gc.compile(backend="interp")
def train_step(x, y):""") + """

for epoch in range(3):
    print(f"epoch {epoch} loss {float(train_step(X[:40], Y[:40])):.4f}")
print("training finished")
"""

METHOD = PRELUDE.format(momentum="") + """

class Trainer:
    def __init__(self):
        self.step = gc.compile(self._step, example_args=(X, Y), backend="interp")

""" + step_def("def _step(self, x, y):", "    ") + """

def main():
    trainer = Trainer()
    for _ in range(3):
        trainer.step(X, Y)
    print("training finished")


if __name__ == "__main__":
    main()
"""


def test_dump_finds_a_step_defined_inside_main(capsys, tmp_path):
    script = tmp_path / "inside_main.py"
    script.write_text(INSIDE_MAIN)
    for name in ("train_step", "main.train_step"):
        rc, out, err = run(capsys, "dump", f"{script}:{name}")
        assert rc == 0, err
        assert out.startswith("graph train_step(x: f32[B,1], y: f32[B,1])"), out
        assert "loading data" not in out and "loading data" in err  # the user's output
        assert "epoch" not in err and "training finished" not in err  # stopped before training


def test_dump_of_a_step_without_example_args_stops_at_its_first_call(capsys, tmp_path):
    script = tmp_path / "top_level_loop.py"
    script.write_text(TOP_LEVEL_LOOP)
    rc, out, err = run(capsys, "dump", f"{script}:train_step")
    assert rc == 0, err
    assert out.startswith("graph train_step(x: f32[B,1], y: f32[B,1])"), out
    assert "loading data" not in out and "epoch" not in out
    assert "epoch" not in err  # the first call was traced, not run, and the loop stopped
    note = [ln for ln in err.splitlines() if ln.startswith("graphc: note: ")]
    assert len(note) == 1 and "no example_args" in note[0], err
    assert "@gc.compile(example_args=(" in note[0]


def test_dump_finds_a_method_compiled_in_init(capsys, tmp_path):
    script = tmp_path / "method_step.py"
    script.write_text(METHOD)
    for name in ("_step", "Trainer._step"):
        rc, out, err = run(capsys, "dump", f"{script}:{name}")
        assert rc == 0, (name, err)
        assert out.startswith("graph _step(x: f32[B,1], y: f32[B,1])"), out
        assert "training finished" not in err


def test_aot_of_a_step_traced_at_its_first_call_uses_that_calls_arguments(capsys, tmp_path,
                                                                           monkeypatch):
    script = tmp_path / "top_level_aot.py"
    script.write_text(TOP_LEVEL_LOOP)
    shapes = []

    def build(fn, example_args, out_dir, name, target=None):
        shapes.append([a.shape for a in example_args])

    monkeypatch.setattr(cli, "_aot_module", lambda: fake_aot(build))
    rc, _, err = run(capsys, "aot", f"{script}:train_step", "-o", str(tmp_path / "b"))
    assert rc == 0, err
    assert shapes == [[(40, 1), (40, 1)]]


def test_step_never_traced_says_how_to_give_example_args(capsys, tmp_path):
    script = tmp_path / "never_called.py"
    script.write_text(PRELUDE.format(momentum="") + """
def main():
    @gc.compile(backend="interp")
    def train_step(x, y):
        return loss_fn(model(x), y)
    print("nothing calls it")


if __name__ == "__main__":
    main()
""")
    rc, out, err = run(capsys, "dump", f"{script}:train_step")
    assert rc == 1 and out == ""
    last = err.strip().splitlines()[-1]
    assert last.startswith("graphc: error: ") and "without example_args" in last, err
    assert "@gc.compile(example_args=(" in last


def test_missing_step_names_the_steps_it_saw(capsys, tmp_path):
    script = tmp_path / "inside_main_missing.py"
    script.write_text(INSIDE_MAIN)
    rc, out, err = run(capsys, "dump", f"{script}:eval_step")
    assert rc == 1 and out == ""
    last = err.strip().splitlines()[-1]
    assert "no compiled step 'eval_step'" in last and "main.train_step" in last, err


FD_OUTPUT = """\
import os
print("python-level chatter")
os.write(1, b"fd-level chatter\\n")
""" + PRELUDE.format(momentum="") + """
""" + step_def("""\
@gc.compile(backend="interp")
def train_step(x, y):""") + """

train_step(X, Y)
"""


def test_user_output_never_reaches_stdout(tmp_path):
    """Both Python prints and writes to file descriptor 1 go to stderr (a subprocess, as a
    user runs it, since capsys does not see file descriptors)."""
    script = tmp_path / "chatty.py"
    script.write_text(FD_OUTPUT)
    proc = subprocess.run([sys.executable, "-m", "graphc", "dump", f"{script}:train_step"],
                          capture_output=True, text=True, env=_env(), timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("graph train_step("), proc.stdout
    assert "chatter" not in proc.stdout
    assert "python-level chatter" in proc.stderr and "fd-level chatter" in proc.stderr


def _env() -> dict[str, str]:
    root = str(Path(graphc.__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return env


# -- aot: targets, files written, stages (issue 20, item 3) ----------------------------------

def _graphc(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "graphc", *argv], capture_output=True,
                          text=True, env=_env(), timeout=300, check=False)


@pytest.mark.parametrize("target, needles", [
    ("pentium9", ["'pentium9'", "did you mean", "x86-64-v3", "--target help"]),
    ("pentium4", ["'pentium4'", "64-bit"]),  # known to LLVM, but a 32-bit CPU
])
def test_aot_bad_target_is_a_usage_error_before_llvm(tmp_path, script, target, needles):
    if not cli._aot_module():
        pytest.skip("ahead-of-time builds are not available in this build")
    from graphc.aot import llvm_catalog

    if "x86-64-v3" not in llvm_catalog()[1]:
        pytest.skip("the host target is not x86-64")
    proc = _graphc("aot", f"{script}:train_step", "-o", str(tmp_path / "b"), "--target",
                   target)
    assert proc.returncode == 2, proc.stderr
    assert_one_line_error(proc.stderr, "--target", *needles)
    assert "LLVM ERROR" not in proc.stderr and "not a recognized" not in proc.stderr
    assert not (tmp_path / "b").exists()


def test_aot_target_help_lists_the_cpus():
    if not cli._aot_module():
        pytest.skip("ahead-of-time builds are not available in this build")
    proc = _graphc("aot", "--target", "help")
    assert proc.returncode == 0, proc.stderr
    from graphc.aot import llvm_catalog

    triple, cpus, _ = llvm_catalog()
    assert triple in proc.stdout
    assert set(proc.stdout.split()) >= set(cpus)


def test_target_and_feature_checks_name_the_argument_and_the_value():
    if not cli._aot_module():
        pytest.skip("ahead-of-time builds are not available in this build")
    from graphc.aot import TargetError, check_target, llvm_catalog

    triple, cpus, feats = llvm_catalog()
    assert cpus and feats, "LLVM's CPU and feature tables could not be read"
    check_target(None)
    check_target("native")
    with pytest.raises(TargetError, match=r"target: .*got 'no-such-cpu'"):
        check_target("no-such-cpu")
    with pytest.raises(TargetError, match=r"features: expected '\+name' or '-name'.*got 'x'"):
        check_target(None, "x")
    name = feats[0]
    check_target(None, f"+{name},-{name}")
    with pytest.raises(TargetError, match=rf"features: .*got '{name}zz'"):
        check_target(None, f"+{name}zz")


def test_aot_mentions_every_file_it_writes(capsys, script, tmp_path, monkeypatch):
    def build(fn, example_args, out_dir, name, target=None):
        paths = {"header": f"{name}.h", "object": f"{name}.o", "shared": f"lib{name}.so",
                 "source": f"{name}.c"}
        for k, f in paths.items():
            paths[k] = str(Path(out_dir, f))
            Path(paths[k]).write_text("")
        return paths

    monkeypatch.setattr(cli, "_aot_module", lambda: fake_aot(build))
    rc, out, err = run(capsys, "aot", f"{script}:train_step", "-o", str(tmp_path / "b"))
    assert rc == 0, err
    written = sorted(p.name for p in (tmp_path / "b").iterdir())
    assert written == ["libtrain_step.so", "train_step.c", "train_step.h", "train_step.o"]
    for name in written:
        assert name in out, (name, out)


def test_dump_help_lists_every_stage_a_native_step_has(capsys, tmp_path):
    try:
        importlib.import_module("graphc.codegen.cpu")
    except ImportError:
        pytest.skip("the native CPU backend is not available in this build")
    script = write_script(tmp_path, "native_stages.py", backend=None)
    rc, out, err = run(capsys, "dump", f"{script}:train_step", "--stage", "all")
    assert rc == 0, err
    stages = re.findall(r"^==== (\w+) ====$", out, re.M)
    assert "llvm_unoptimized" in stages
    with pytest.raises(SystemExit):
        cli.main(["dump", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for stage in stages:
        assert stage in cli.KNOWN_STAGES, stage
        assert re.search(rf"\b{stage}\b", help_text), stage


# -- a light command line (issue 20, item 5) -------------------------------------------------

HEAVY = ("numpy", "sympy", "llvmlite", "graphc.tensor", "graphc.api", "graphc.codegen")


def _modules_after(code: str) -> set[str]:
    """The modules loaded after running ``code`` in a fresh interpreter."""
    proc = subprocess.run([sys.executable, "-c", code + "\nimport sys\n"
                           "print('MODULES', ' '.join(sorted(sys.modules)))"],
                          capture_output=True, text=True, env=_env(), timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    last = [ln for ln in proc.stdout.splitlines() if ln.startswith("MODULES ")][-1]
    return set(last.split()[1:])


def test_the_cli_module_adds_nothing_heavy_to_the_package():
    """What ``graphc.cli`` imports beyond the ``graphc`` package, for ``--help`` and usage
    errors: the standard library only (the commands import the compiler when they run)."""
    code = ("import sys\nimport graphc\nbefore = set(sys.modules)\nfrom graphc import cli\n"
            "try:\n    cli.main(['--help'])\nexcept SystemExit:\n    pass\n"
            "for name in sorted(set(sys.modules) - before):\n    print('new', name)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=_env(), timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    new = {ln.split()[1] for ln in proc.stdout.splitlines() if ln.startswith("new ")}
    outside = {m for m in new if m.split(".")[0] not in sys.stdlib_module_names}
    assert outside == {"graphc.cli"}, outside


@pytest.mark.parametrize("argv", [["--help"], ["dump", "--help"], ["aot", "--help"]])
def test_help_does_not_import_the_compiler(argv):
    """``graphc.cli:main`` imports the package first, so the package itself must be light:
    it resolves its public names on first use (PEP 562), not at ``import graphc``."""
    code = (f"from graphc import cli\ntry:\n    cli.main({argv!r})\nexcept SystemExit:\n"
            "    pass\n")
    loaded = _modules_after(code)
    assert not [m for m in HEAVY if m in loaded], sorted(m for m in HEAVY if m in loaded)


def test_the_console_script_prints_help():
    """The installed entry point, as a user runs it: ``python -m graphc --help`` exits 0
    and lists the commands."""
    proc = subprocess.run([sys.executable, "-m", "graphc", "--help"], capture_output=True,
                          text=True, env=_env(), timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "dump" in proc.stdout and "aot" in proc.stdout
