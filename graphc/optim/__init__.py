"""Optimizers (``graphc.optim``), mirroring ``torch.optim``."""

from .optimizer import Optimizer
from .sgd import SGD

__all__ = ["Optimizer", "SGD"]
