"""Peak resident memory of a process running a step, graphc vs PyTorch eager.

``python -m benchmarks.memory [workload ...]`` runs each workload's step 50 times in a fresh
child process per system (so import costs and allocator state are separate) and reports the
peak RSS the kernel recorded for the child (``ru_maxrss``, what ``/usr/bin/time -v`` prints),
plus the growth over the process's RSS right after imports and model construction — the part
the step itself is responsible for.
"""

from __future__ import annotations

import json
import subprocess
import sys

CHILD = r'''
import json, os, resource, sys
os.environ.setdefault("GRAPHC_NUM_THREADS", "1")
def rss_now():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
which, name = sys.argv[1], sys.argv[2]
if which == "graphc":
    torch = None  # the graphc process never imports PyTorch
else:
    import torch
    torch.set_num_threads(1)
from benchmarks.workloads import all_workloads
w = [w for w in all_workloads(torch) if w.name == name][0]
fn = w.graphc_step if which == "graphc" else w.torch_step
base = rss_now()
for _ in range(50):
    fn()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"peak": peak, "base": base, "after": rss_now()}))
'''


def measure(which: str, name: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, which, name], capture_output=True,
                         text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    names = argv if argv else ["seed", "mlp_small", "mlp_large", "adam", "infer"]
    # every child builds all the workloads: fill the on-disk compile cache first, so that no
    # row's peak includes LLVM compiling six steps (measured: 258 MiB instead of 160)
    measure("graphc", names[0])
    print(f"{'workload':<10} {'graphc peak MiB':>16} {'torch peak MiB':>15} "
          f"{'graphc step growth':>19} {'torch step growth':>18}")
    for n in names:
        g, t = measure("graphc", n), measure("torch", n)
        mib = 2.0 ** 20
        print(f"{n:<10} {g['peak'] / mib:>16.1f} {t['peak'] / mib:>15.1f} "
              f"{(g['after'] - g['base']) / mib:>19.1f} {(t['after'] - t['base']) / mib:>18.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
