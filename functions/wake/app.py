"""The ``wake`` Lambda function (template.yaml: ``Handler: wake/app.handler``).

Everything it does is :mod:`dormant.aws.wake`; the app it serves is the one the ``DORMANT_APP``
setting names (template.yaml, Globals).
"""

from dormant.aws.wake import handler

__all__ = ["handler"]
