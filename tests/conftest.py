import numpy as np
import pytest

import graphc as gc


@pytest.fixture(autouse=True)
def _seed():
    gc.manual_seed(0)
    np.random.seed(0)
    yield
