"""The run loop: one turn of an agent against a session, as a generator of stream events.

What lives where:

- :mod:`dormant._run.state` -- :class:`~dormant._run.state.RunState`, everything a turn
  shares (agent, session, hooks, signal, clock, invocation id, what was said, usage, whether
  tools ran), with the helpers every phase needs (``emit``, ``hook_context``,
  ``note_effects``, ``flush``). One object, passed explicitly to every function below.
- :mod:`dormant._run.loop` -- :func:`run_turn`: carries on a turn whose invocation the
  request room opened (a :class:`~dormant._run.state.Start`): the model loop and its steps,
  settling (end or park), results, failure handling, derived call ids.
- :mod:`dormant._run.tools` -- the tool phase of a model step: validate, hold for approval,
  prepare yields, execute (independent calls concurrently), state patches per call, and the
  resume of a parked step.
"""

from dormant._run.loop import derive_call_id, drain, run_turn
from dormant._run.state import Overtaken, Start, WriteAhead

__all__ = ["Overtaken", "Start", "WriteAhead", "derive_call_id", "drain", "run_turn"]
