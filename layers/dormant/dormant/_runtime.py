"""Compatibility shim: the run loop now lives in :mod:`dormant._run`."""
from dormant._run import TurnInput, run_turn

__all__ = ["TurnInput", "run_turn"]
