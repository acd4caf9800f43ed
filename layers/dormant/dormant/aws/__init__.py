"""The Lambda functions of a dormant deployment: what ``template.yaml``'s functions run.

Each module builds what its function serves once per cold start, at import, and exposes
``handler``: :mod:`.api` (API Gateway REST and AG-UI), :mod:`.webhook` (SQS FIFO),
:mod:`.wake` (EventBridge Scheduler timers), :mod:`.cleanup` (the table's stream: offloaded
S3 objects go with their items). Which app they serve is the one setting ``DORMANT_APP``
(:mod:`.deployment`). A project's ``functions/<name>/app.py`` is one line importing ``handler``
from here, so upgrading dormant upgrades the functions; nothing of it is imported by the
library itself, so nothing of it is on a plain ``import dormant``'s path.
"""
