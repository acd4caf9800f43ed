"""The ``webhook`` Lambda function (template.yaml: ``Handler: webhook/app.handler``).

Everything it does is :mod:`dormant.aws.webhook`; the app it serves is the one the ``DORMANT_APP``
setting names (template.yaml, Globals).
"""

from dormant.aws.webhook import handler

__all__ = ["handler"]
