"""Neural-network layers, losses and utilities (``graphc.nn``), mirroring ``torch.nn``."""

from . import functional, init, utils
from .layers import Flatten, Identity, Linear, ModuleList, ReLU, Sequential, Sigmoid, Tanh
from .loss import L1Loss, MSELoss
from .module import Module, Parameter

__all__ = [
    "Module", "Parameter", "Linear", "ReLU", "Tanh", "Sigmoid", "Flatten", "Identity",
    "Sequential", "ModuleList", "L1Loss", "MSELoss", "functional", "init", "utils",
]
