import os

# every kernel the suite compiles is emitted even when its key says an equal one exists, and
# the two are compared (graphc.codegen.lower.VERIFY_KERNEL_KEYS): a key that calls two
# different kernels equal fails the test that compiled them
os.environ.setdefault("GRAPHC_VERIFY_KERNEL_KEYS", "1")
# and every graph is verified after every pass (graphc.passes.pipeline.verify_default)
os.environ.setdefault("GRAPHC_VERIFY_IR", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import graphc as gc  # noqa: E402


@pytest.fixture(autouse=True)
def _seed():
    gc.manual_seed(0)
    np.random.seed(0)
    yield
