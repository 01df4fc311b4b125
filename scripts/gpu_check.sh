#!/usr/bin/env bash
# GPU check for the PTX backend, in one go (well under 10 minutes on one GPU):
#   1. the GPU tests of tests/test_ptx.py (every op and the MLP steps against the CPU backend);
#   2. ms per training step for mlp_small / mlp_large: graphc cuda (both state modes),
#      graphc cpu, and PyTorch CUDA when torch with CUDA is installed.
# Writes the report to stdout and to ${1:-gpu_check_report.txt}.
# Usage: scripts/gpu_check.sh [REPORT_FILE]
set -uo pipefail
cd "$(dirname "$0")/.."
REPORT="${1:-gpu_check_report.txt}"
: > "$REPORT"
say() { echo "$@" | tee -a "$REPORT"; }

say "# graphc PTX backend GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
if command -v nvidia-smi >/dev/null 2>&1; then
    say "$(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader)"
fi
python - <<'EOF' 2>&1 | tee -a "$REPORT"
from graphc.runtime import cuda_runtime as cuda
if cuda.available():
    d = cuda.driver()
    print(f"driver ok: {d.name()} compute capability {d.compute_capability()}")
else:
    print("NO GPU: the GPU tests will be skipped and nothing below is measured")
EOF

say ""
say "## GPU tests (tests/test_ptx.py -k gpu)"
timeout 300 python -m pytest -q -rs tests/test_ptx.py -k gpu -p no:cacheprovider 2>&1 \
    | tail -n 25 | tee -a "$REPORT"
say "pytest exit code: ${PIPESTATUS[0]}"

say ""
say "## ms per step (median of timed steps; every graphc step returns its loss to the host)"
timeout 240 python - <<'EOF' 2>&1 | tee -a "$REPORT"
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, "tests")
import graphc as gc  # noqa: E402
from graphc.runtime import cuda_runtime as cuda  # noqa: E402
from test_ptx import _mlp_step  # noqa: E402

CONFIGS = {"mlp_small": ((784, 256, 10), 64), "mlp_large": ((784, 1024, 1024, 10), 256)}
STEPS = 30


def timed(fn, args, sync=None):
    for _ in range(3):
        fn(*args)
    times = []
    for _ in range(STEPS):
        t0 = time.perf_counter()
        fn(*args)
        if sync:
            sync()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


rows = []
for name, (dims, batch) in CONFIGS.items():
    variants = [("cpu", None)]
    if cuda.available():
        variants += [("cuda", "sync"), ("cuda", "resident")]
    for device, mode in variants:
        if mode:
            os.environ["GRAPHC_CUDA_STATE"] = mode
        gc.manual_seed(0)
        step, args, _, _ = _mlp_step("mse", "sgd", dims=dims, batch=batch)
        fn = gc.compile(step, device=device)
        try:
            ms = timed(fn, args)
            rows.append((name, f"graphc {device}" + (f" ({mode})" if mode else ""), ms))
        except Exception as e:  # noqa: BLE001
            rows.append((name, f"graphc {device} FAILED: {type(e).__name__}: {e}", float("nan")))
    try:
        import torch
        if torch.cuda.is_available():
            dev = torch.device("cuda")
            torch.manual_seed(0)
            layers = []
            for k, (i, o) in enumerate(zip(dims[:-1], dims[1:])):
                layers.append(torch.nn.Linear(i, o))
                if k < len(dims) - 2:
                    layers.append(torch.nn.ReLU())
            tm = torch.nn.Sequential(*layers).to(dev)
            opt = torch.optim.SGD(tm.parameters(), lr=1e-2, momentum=0.9)
            lf = torch.nn.MSELoss()
            rng = np.random.default_rng(0)
            x = torch.from_numpy(rng.standard_normal((batch, dims[0])).astype(np.float32))
            y = torch.from_numpy(np.eye(dims[-1], dtype=np.float32)[
                rng.integers(0, dims[-1], batch)])

            def tstep(x, y):
                x, y = x.to(dev), y.to(dev)  # inputs copied in per step, like graphc
                opt.zero_grad()
                loss = lf(tm(x), y)
                loss.backward()
                opt.step()
                return loss.item()

            rows.append((name, "torch cuda", timed(tstep, (x, y))))
        else:
            rows.append((name, "torch cuda: not available", float("nan")))
    except ImportError:
        rows.append((name, "torch: not installed", float("nan")))

for name, what, ms in rows:
    print(f"{name:10s} {what:40s} {ms:9.3f} ms")
EOF
say ""
say "report written to $REPORT"
