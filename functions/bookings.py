"""The app these functions serve (template.yaml: ``DORMANT_APP: bookings:build``): the Bookings
sample, which ships in the package as :mod:`dormant.samples.bookings` so that ``dormant dev``
serves it from any directory.

A project of your own keeps its app here instead: ``dormant new NAME`` writes
``functions/app.py`` and a template naming ``app:build``.
"""

from dormant.samples.bookings import Bookings, DemoModel, build, describe_model

__all__ = ["Bookings", "DemoModel", "build", "describe_model"]
