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
