"""The warning ``pytest -p aiowheel.pytest --aiowheel-lingering warn`` gives, in a module of its
own: a warnings filter names it as ``aiowheel.LingeringTimerWarning`` (``-W``, the
``filterwarnings`` ini option) without importing the plugin before pytest loads it, which would
keep pytest from rewriting the plugin's asserts and warn about that."""

from __future__ import annotations

__all__ = ["LingeringTimerWarning"]


class LingeringTimerWarning(UserWarning):
    """A test left a timer pending on its loop-mode loop (``pytest -p aiowheel.pytest
    --aiowheel-lingering warn``); the message names each timer and the line that filed it.

    Under ``warn`` the plugin never lets a warnings filter turn it into an error: a suite with
    ``filterwarnings = error`` still passes, with the warning in its summary. An ``ignore``
    filter silences it (``-W ignore::aiowheel.LingeringTimerWarning``); to fail such a test,
    ``--aiowheel-lingering error``. Also importable as ``aiowheel.pytest.LingeringTimerWarning``
    (the same class)."""
