"""Scheduler backends (SPEC §7): where committed timers are set and from where they fire.

Each backend lives in its own module, imported where it is used, so the Lambda import path
loads only its own: ``dormant.schedulers.local`` (``dormant dev``) and
``dormant.schedulers.eventbridge`` (AWS).
"""
