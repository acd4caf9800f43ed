"""The ``cleanup`` Lambda function (template.yaml: ``Handler: cleanup/app.handler``).

Everything it does is :mod:`dormant.aws.cleanup`; the app it serves is the one the ``DORMANT_APP``
setting names (template.yaml, Globals).
"""

from dormant.aws.cleanup import handler

__all__ = ["handler"]
