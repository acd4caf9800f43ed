"""The ``stream`` Lambda function (template.yaml: ``Handler: stream/app.handler``).

Everything it does is :mod:`dormant.aws.stream`; the app it serves is the one the ``DORMANT_APP``
setting names (template.yaml, Globals).
"""

import gc

gc.disable()  # until the cold start is built: dormant.aws.initialised() resumes it
from dormant.aws.stream import handler  # noqa: E402

__all__ = ["handler"]
