"""Seeing every timer: the census of a loop's pending timers (the wheel's and the base loop's
own), origins, lag and the deadline guarding a task, and the OpenTelemetry instruments read
from them. Imports ``_common`` and ``_time``.
"""
