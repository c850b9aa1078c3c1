"""Importing this module registers every workload (training, inference, other, adversarial)."""

from . import infer, other, train  # noqa: F401
from . import adversarial  # noqa: F401
from .base import WORKLOADS

__all__ = ["WORKLOADS"]
