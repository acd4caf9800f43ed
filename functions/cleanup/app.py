"""The ``cleanup`` Lambda function (template.yaml: ``Handler: cleanup/app.handler``).

Everything it does is :mod:`dormant.aws.cleanup`; the app it serves is the one the ``DORMANT_APP``
setting names (template.yaml, Globals).
"""

import gc

gc.disable()  # until the cold start is built: dormant.aws.initialised() resumes it
from dormant.aws.cleanup import handler  # noqa: E402

__all__ = ["handler"]
