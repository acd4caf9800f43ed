"""Deprecated: import from :mod:`dormant.schedulers` instead.

``dormant.scheduling`` is an alias of that package (the same module object), so
``from dormant.scheduling import LocalScheduler`` keeps working and the backends stay lazy.
Nothing in the library imports it.
"""

import sys

import dormant.schedulers

sys.modules[__name__] = dormant.schedulers
