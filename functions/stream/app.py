"""The ``stream`` Lambda function (template.yaml: ``Handler: stream/app.handler``).

Everything it does is :mod:`dormant.aws.stream`; the app it serves is the one the ``DORMANT_APP``
setting names (template.yaml, Globals).
"""

from dormant.aws.stream import handler

__all__ = ["handler"]
