"""The ``wake`` Lambda function (template.yaml: ``Handler: wake/app.handler``).

Everything it does is :mod:`dormant.aws.wake`; the app it serves is the one the ``DORMANT_APP``
setting names (template.yaml, Globals).
"""

import gc

gc.disable()  # until the cold start is built: dormant.aws.initialised() resumes it
from dormant.aws.wake import handler  # noqa: E402

__all__ = ["handler"]
