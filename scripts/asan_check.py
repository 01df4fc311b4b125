"""Memory-check ahead-of-time steps: ``python scripts/asan_check.py OUT_DIR [--valgrind]``.

Builds two AOT libraries with ``graphc.aot.build`` — the seed step (``Linear(1, 1)``, L1 loss,
SGD) and an MLP with ``CrossEntropyLoss`` and Adam — and a C harness that calls them with good
and bad inputs: every batch size 1..300 (inputs in exactly-sized heap blocks, so a read past
the end lands in a red zone), class targets out of range (C and -1), batch sizes 0 and -1, NULL
arguments, an input that aliases a state tensor, a result pointer inside a state tensor, and a
checkpoint round trip. It checks the return codes and that failed calls left the state
unchanged, then prints ``harness OK``.

By default the harness is compiled with ``-fsanitize=address,undefined`` (the generated
kernels are not instrumented, but their ``memcpy`` commits and everything the wrapper does are,
and the inputs carry red zones); ``--valgrind`` builds it without sanitizers and runs it under
``valgrind --error-exitcode=1`` (libraries built for ``x86-64-v3``: valgrind has no AVX-512),
which also checks every load and store of the uninstrumented
kernel code. Exit status 0 means no report. ``tests/test_asan.py`` runs both when available.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

HARNESS = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "seed.h"
#include "mlp.h"

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "FAIL line %d: %s\n", __LINE__, #c); \
    exit(2); } } while (0)

/* a copy of every state tensor, to compare after a failed call */
#define SNAP(NAME) \
static unsigned char* NAME##_snap(NAME##_state* s) { \
    size_t i, off = 0, tot = 0; unsigned char* p; \
    for (i = 0; i < NAME##_num_tensors(); i++) tot += NAME##_tensor(i)->nbytes; \
    p = (unsigned char*)malloc(tot + 1); CHECK(p); \
    for (i = 0; i < NAME##_num_tensors(); i++) { \
        const NAME##_tensor_info* t = NAME##_tensor(i); \
        memcpy(p + off, NAME##_param_data(s, t->name), t->nbytes); off += t->nbytes; } \
    return p; } \
static int NAME##_same(NAME##_state* s, const unsigned char* p) { \
    size_t i, off = 0; int same = 1; \
    for (i = 0; i < NAME##_num_tensors(); i++) { \
        const NAME##_tensor_info* t = NAME##_tensor(i); \
        if (memcmp(p + off, NAME##_param_data(s, t->name), t->nbytes)) same = 0; \
        off += t->nbytes; } \
    return same; }
SNAP(seed)
SNAP(mlp)

static float frand(unsigned* r) {
    *r = *r * 1103515245u + 12345u;
    return (float)((*r >> 8) % 2000) / 1000.0f - 1.0f;
}

static void run_seed(const char* dir) {
    seed_state* s = seed_create();
    float loss; int64_t b; unsigned r = 1; char path[4096]; unsigned char* snap;
    CHECK(s);
    for (b = 1; b <= 300; b++) {
        float* x = (float*)malloc((size_t)b * sizeof(float));
        float* y = (float*)malloc((size_t)b * sizeof(float));
        int64_t i;
        for (i = 0; i < b; i++) { x[i] = frand(&r); y[i] = 0.7f * x[i] + 0.3f; }
        CHECK(seed_step(s, x, y, b, NULL, &loss) == GRAPHC_OK);
        CHECK(seed_step(s, x, y, b, NULL, NULL) == GRAPHC_OK);
        snap = seed_snap(s);
        CHECK(seed_step(s, x, y, 0, NULL, &loss) == GRAPHC_EBATCH);
        CHECK(seed_step(s, x, y, -1, NULL, &loss) == GRAPHC_EBATCH);
        CHECK(seed_step(s, NULL, y, b, NULL, &loss) == GRAPHC_EINVAL);
        CHECK(seed_step(NULL, x, y, b, NULL, &loss) == GRAPHC_EINVAL);
        CHECK(seed_step(s, x, y, b, NULL, (float*)seed_param_data(s, "model.linear_layer.bias"))
              == GRAPHC_EINVAL);
        CHECK(seed_same(s, snap));
        free(snap); free(x); free(y);
    }
    /* an input aliasing the weight (one element: batch 1) */
    CHECK(seed_step(s, (const float*)seed_param_data(s, "model.linear_layer.weight"),
                    (const float*)seed_param_data(s, "model.linear_layer.bias"), 1, NULL,
                    &loss) == GRAPHC_OK);
    snprintf(path, sizeof path, "%s/seed_ckpt.npz", dir);
    CHECK(seed_save(s, path) == GRAPHC_OK);
    CHECK(seed_load(s, path) == GRAPHC_OK);
    seed_destroy(s);
}

static void run_mlp(const char* dir) {
    mlp_state* s = mlp_create();
    float loss; int64_t b, info[4]; unsigned r = 7; char path[4096]; unsigned char* snap;
    const int64_t F = MLP_FEATURES, C = MLP_CLASSES;
    CHECK(s);
    for (b = 1; b <= 300; b++) {
        float* x = (float*)malloc((size_t)(b * F) * sizeof(float));
        int64_t* y = (int64_t*)malloc((size_t)b * sizeof(int64_t));
        int64_t i;
        for (i = 0; i < b * F; i++) x[i] = frand(&r);
        for (i = 0; i < b; i++) y[i] = i % C;
        CHECK(mlp_step(s, x, y, b, NULL, &loss) == GRAPHC_OK);
        snap = mlp_snap(s);
        y[b - 1] = C;
        CHECK(mlp_step(s, x, y, b, NULL, &loss) == GRAPHC_EINDEX);
        mlp_last_error(s, info);
        CHECK(info[2] == b - 1 && info[3] == C);
        y[b - 1] = -1;
        CHECK(mlp_step(s, x, y, b, NULL, &loss) == GRAPHC_EINDEX);
        y[0] = INT64_MAX;
        CHECK(mlp_step(s, x, y, b, NULL, NULL) == GRAPHC_EINDEX);
        CHECK(mlp_step(s, x, y, 0, NULL, &loss) == GRAPHC_EBATCH);
        CHECK(mlp_step(s, x, NULL, b, NULL, &loss) == GRAPHC_EINVAL);
        CHECK(mlp_same(s, snap));
        free(snap); free(x); free(y);
    }
    {   /* x aliasing the first layer's weight (>= 2 rows of F floats) */
        int64_t y2[2] = {0, 1};
        const float* w = (const float*)mlp_param_data(s, "model.0.weight");
        CHECK(mlp_step(s, w, y2, 2, NULL, &loss) == GRAPHC_OK);
    }
    snprintf(path, sizeof path, "%s/mlp_ckpt.npz", dir);
    CHECK(mlp_save(s, path) == GRAPHC_OK);
    CHECK(mlp_load(s, path) == GRAPHC_OK);
    mlp_destroy(s);
}

int main(int argc, char** argv) {
    const char* dir = argc > 1 ? argv[1] : ".";
    run_seed(dir);
    run_mlp(dir);
    printf("harness OK\n");
    return 0;
}
"""

FEATURES, HIDDEN, CLASSES = 20, 32, 5


def build_libraries(out: Path, target: str | None = None) -> None:
    """The seed step and the MLP step as AOT libraries ``seed`` and ``mlp`` in ``out``."""
    import graphc as gc
    from graphc import nn, optim

    gc.manual_seed(0)
    lin = nn.Linear(1, 1)
    l1 = nn.L1Loss()
    sgd = optim.SGD(lin.parameters(), lr=0.01)
    x = np.linspace(0, 1, 40, dtype=np.float32)[:, None]

    class Seed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear_layer = lin

        def forward(self, v: Any) -> Any:
            return self.linear_layer(v)

    model_seed = Seed()

    def seed_step(a: Any, b: Any) -> Any:
        loss = l1(model_seed(a), b)
        sgd.zero_grad()
        loss.backward()
        sgd.step()
        return loss

    seed_step.__globals__["model"] = model_seed  # state names "model.linear_layer.*"
    gc.aot.build(gc.compile(seed_step), (x, 0.7 * x + 0.3), str(out), "seed", target)

    model = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES))
    adam = optim.Adam(model.parameters(), lr=1e-3)
    ce = nn.CrossEntropyLoss()

    def mlp_step(a: Any, t: Any) -> Any:
        adam.zero_grad()
        loss = ce(model(a), t)
        loss.backward()
        adam.step()
        return loss

    mlp_step.__globals__["model"] = model
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((8, FEATURES)).astype(np.float32)
    gc.aot.build(gc.compile(mlp_step), (xs, rng.integers(0, CLASSES, 8)), str(out), "mlp", target)


def has_asan(cc: str) -> bool:
    """Whether ``cc`` can build and run an AddressSanitizer program here."""
    if shutil.which(cc) is None:
        return False
    with __import__("tempfile").TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "t.c", Path(tmp) / "t"
        src.write_text("int main(void) { return 0; }\n")
        r = subprocess.run([cc, "-fsanitize=address", str(src), "-o", str(exe)],
                           capture_output=True)
        return r.returncode == 0 and subprocess.run([str(exe)], capture_output=True
                                                    ).returncode == 0


def build_harness(out: Path, sanitize: bool, cc: str = "cc") -> Path:
    (out / "harness.c").write_text(HARNESS)
    exe = out / ("harness_asan" if sanitize else "harness")
    flags = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer"] if sanitize else []
    cmd = [cc, "-std=c99", "-g", "-O1", *flags, f"-DMLP_FEATURES={FEATURES}",
           f"-DMLP_CLASSES={CLASSES}", f"-I{out}", str(out / "harness.c"), str(out / "seed.o"),
           str(out / "mlp.o"), "-lm", "-o", str(exe)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return exe


def run(out: Path, valgrind: bool = False, cc: str = "cc") -> subprocess.CompletedProcess:
    """Build everything in ``out`` and run the harness (ASan, or plain under valgrind)."""
    if valgrind:  # valgrind has no AVX-512: build for AVX2 machines, in a folder of its own
        out = out / "valgrind"
    out.mkdir(parents=True, exist_ok=True)
    if not (out / "mlp.o").exists():
        build_libraries(out, "x86-64-v3" if valgrind else None)
    exe = build_harness(out, sanitize=not valgrind, cc=cc)
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=0",
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
    cmd = [str(exe), str(out)]
    if valgrind:
        cmd = ["valgrind", "--error-exitcode=1", "--leak-check=full", "--quiet", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python scripts/asan_check.py")
    ap.add_argument("out_dir")
    ap.add_argument("--valgrind", action="store_true", help="no sanitizers; run under valgrind")
    a = ap.parse_args(argv)
    r = run(Path(a.out_dir), a.valgrind)
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr)
    return r.returncode


if __name__ == "__main__":
    raise SystemExit(main())
