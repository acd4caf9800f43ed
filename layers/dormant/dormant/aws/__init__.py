"""The Lambda functions of a dormant deployment: what ``template.yaml``'s functions run.

Each module builds what its function serves once per cold start, at import, and exposes
``handler``: :mod:`.api` (API Gateway REST and AG-UI), :mod:`.webhook` (SQS FIFO),
:mod:`.wake` (EventBridge Scheduler timers), :mod:`.cleanup` (the table's stream: offloaded
S3 objects go with their items). Which app they serve is the one setting ``DORMANT_APP``
(:mod:`.deployment`). A project's ``functions/<name>/app.py`` is one line importing ``handler``
from here, so upgrading dormant upgrades the functions; nothing of it is imported by the
library itself, so nothing of it is on a plain ``import dormant``'s path.
"""

import gc

__all__ = ["initialised"]


def initialised() -> None:
    """The end of a function's cold start, called last by each function module.

    ``functions/<name>/app.py`` turns the garbage collector off before it imports anything:
    what a cold start builds (modules, classes, the app, its clients) lives as long as the
    execution environment, and collections while it is built find nothing to free. Here it is
    moved out of the collector's sight (``gc.freeze``: later collections do not walk it, and
    a SnapStart snapshot holds it as it is) and collection resumes for what requests make."""
    gc.freeze()
    gc.enable()
