"""hypothesis settings for the fuzzers of the conv-net surface (``test_conv_fuzz``,
``test_pool_fuzz``, ``test_norm_fuzz``): a few derandomized examples by default, so the
suite stays quick and a CI failure reproduces; many random ones with
``HYPOTHESIS_PROFILE=long``. No deadline: a draw compiles steps."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings


def fuzz_settings(ci_examples: int, long_examples: int) -> settings:
    """``ci_examples`` derandomized draws, or ``long_examples`` random ones when
    ``HYPOTHESIS_PROFILE=long``."""
    long = os.environ.get("HYPOTHESIS_PROFILE") == "long"
    return settings(max_examples=long_examples if long else ci_examples, deadline=None,
                    derandomize=not long,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
