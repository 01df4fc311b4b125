"""PyTorch for the parity tests, or a clean module-level skip that says why.

Test modules that compare against PyTorch write ``from _torch import torch``: without PyTorch
installed, pytest reports each such module as skipped (with the reason below) instead of
failing to collect it, so ``pytest`` on a bare install still runs every graphc-only test.
"""

import pytest

torch = pytest.importorskip(
    "torch",
    reason="PyTorch parity tests need torch (pip install -e '.[test]' installs torch==2.13.0)",
)


def _intel_cpu() -> bool:
    from pathlib import Path

    try:
        return "GenuineIntel" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


# PyTorch builds with MKL draw ``bernoulli_`` with a number ``p`` (and, in some versions,
# ``exponential_``) from MKL's own stream on Intel CPUs: there the random-fill tests compare
# the distribution instead of the bits
INTEL = _intel_cpu()
