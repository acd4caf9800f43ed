"""The ``webhook`` Lambda function (template.yaml: ``Handler: webhook/app.handler``).

Everything it does is :mod:`dormant.aws.webhook`; the app it serves is the one the ``DORMANT_APP``
setting names (template.yaml, Globals).
"""

import gc

gc.disable()  # until the cold start is built: dormant.aws.initialised() resumes it
from dormant.aws.webhook import handler  # noqa: E402

__all__ = ["handler"]
