"""Step logic: the StepFrame contract, the moniker registry and built-in monikers.

This package knows nothing of storage, HTTP or how agents are scheduled.
"""
from monikers.frame import FrameIn, FrameOut, Moniker, StepContext, StepError
from monikers.moniker_registry import MonikerRegistry, default_registry

__all__ = ["FrameIn", "FrameOut", "Moniker", "StepContext", "StepError", "MonikerRegistry", "default_registry"]
