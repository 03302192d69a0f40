"""The budget's error, :class:`BudgetExhausted`, in a room of its own: a subclass of a builtin
exception, which mypyc cannot compile, so it stays out of the compiled requests' table
(:mod:`aiowheel._deadlines._deadline`, which re-exports it) and is imported from there by every
room above. Imports nothing.
"""

from __future__ import annotations

__all__ = ["BudgetExhausted"]


class BudgetExhausted(TimeoutError):
    """Less time is left of the request's deadline than a call needs: raised by
    :func:`budget` and :func:`budget_header` instead of starting a call that cannot finish.

    A ``TimeoutError``, so code that handles the deadline handles this too; the middlewares
    answer it as their own deadline (504 if no response has started)."""
