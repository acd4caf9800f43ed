"""The ``api`` Lambda function (template.yaml: ``Handler: api/app.handler``).

Everything it does is :mod:`dormant.aws.api`; the app it serves is the one the ``DORMANT_APP``
setting names (template.yaml, Globals).
"""

from dormant.aws.api import handler

__all__ = ["handler"]
