"""Virtual time's public API, :mod:`aiowheel.testing` (whose docstring is the user's guide): loop
factories on a virtual clock (fuzzed or not), ``advance``, ``clock_of``, ``run``, and the
determinism check; built on loop mode's factories and the clock of :mod:`aiowheel._virtual`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Final, TypeVar

from .._common import _validate
from .._seeing._census import loop_of
from .._time import _dispatch
from .._virtual._fuzz import DEFAULT_JITTER_TICKS, DEFAULT_STALL, Fuzz
from .._virtual._virtual import VirtualClock, VirtualTime
from ._loop import LoopConfig, LoopFactory
from ._loop import virtual_loop_factory as _virtual_loop_factory
from ._loopstate import state_of
from ._runner import run_refusing

__all__ = [
    "Fuzz",
    "FuzzedLoopFactory",
    "NondeterminismError",
    "VirtualClock",
    "VirtualTime",
    "advance",
    "check_determinism",
    "clock_of",
    "first_divergence",
    "run",
    "seeds",
    "virtual_loop_factory",
]

_T = TypeVar("_T")

_DEFAULT_TICK: Final = _validate.DEFAULT_TICK
_DEFAULT_MAX_BATCH: Final = _dispatch.DEFAULT_MAX_BATCH


class FuzzedLoopFactory(LoopFactory):
    """A :class:`~aiowheel.LoopFactory` of virtual loops whose clocks run under :attr:`fuzz`
    (what :func:`virtual_loop_factory` returns when given a ``seed``).

    The seed is not part of the loop's class (one class per config, and a fuzzing run tries
    many seeds): each loop is made as an unfuzzed virtual loop and armed before it runs
    anything. It pickles, with its fuzz.
    """

    __slots__ = ("fuzz",)

    def __init__(self, config: LoopConfig, fuzz: Fuzz) -> None:
        super().__init__(config)
        self.fuzz: Fuzz = fuzz
        """The seed, overshoot bound and stalls of every loop it makes."""

    def __call__(self) -> asyncio.AbstractEventLoop:
        """A new virtual loop-mode event loop, its clock fuzzed."""
        loop = super().__call__()
        clock = clock_of(loop)
        assert clock is not None
        clock.fuzz(self.fuzz)
        return loop

    def __reduce__(self) -> tuple[Any, ...]:
        return (FuzzedLoopFactory, (self.config, self.fuzz))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LoopFactory):
            return NotImplemented
        return self.config == other.config and self.fuzz == getattr(other, "fuzz", None)

    def __hash__(self) -> int:
        return hash((self.config, self.fuzz))

    def __repr__(self) -> str:
        fuzz = self.fuzz
        return (
            f"{super().__repr__()[:-1]}, seed={fuzz.seed!r}, jitter={fuzz.jitter!r}, "
            f"stall_rate={fuzz.stall_rate!r}, stall={fuzz.stall!r})"
        )


FuzzedLoopFactory.__module__ = "aiowheel.testing"  # pickles name the public path (as LoopFactory)


def _fuzz(
    where: str, seed: object, jitter: object, stall_rate: object, stall: object, tick: float
) -> Fuzz | None:
    """The checked Fuzz of these keywords; None without a seed (the others then refused)."""
    if seed is None:
        given = [
            name
            for name, value, default in (
                ("jitter", jitter, None),
                ("stall_rate", stall_rate, 0.0),
                ("stall", stall, DEFAULT_STALL),
            )
            if value != default
        ]
        if given:
            raise TypeError(f"{where}: {', '.join(given)} fuzz the clock: give a seed as well")
        return None
    if jitter is None:
        jitter = DEFAULT_JITTER_TICKS * tick
    return Fuzz.checked(seed, jitter, stall_rate, stall, prefix=f"{where}: ")


def _factory(
    where: str,
    base: object,
    autojump: object,
    start: object,
    tick: object,
    seed: object,
    jitter: object,
    stall_rate: object,
    stall: object,
    max_batch: object,
) -> LoopFactory:
    """:func:`virtual_loop_factory`, every argument checked, errors naming ``where``."""
    factory = _virtual_loop_factory(base, tick, autojump, start, where, max_batch)
    fuzz = _fuzz(where, seed, jitter, stall_rate, stall, factory.config.tick)
    return factory if fuzz is None else FuzzedLoopFactory(factory.config, fuzz)


def virtual_loop_factory(
    base: type[asyncio.AbstractEventLoop] | None = None,
    *,
    autojump: bool | float = True,
    start: float = 0.0,
    tick: float = _DEFAULT_TICK,
    seed: int | None = None,
    jitter: float | None = None,
    stall_rate: float = 0.0,
    stall: float = DEFAULT_STALL,
    max_batch: int | None = _DEFAULT_MAX_BATCH,
) -> LoopFactory:
    """A zero-argument, picklable factory of loop-mode loops on a virtual clock.

    For ``asyncio.run(main(), loop_factory=...)`` (3.12+), ``asyncio.Runner``, anyio's
    ``loop_factory`` backend option and pytest-asyncio's loop factories. ``base`` is the loop
    class (asyncio's default; ``uvloop.Loop``, ``rloop.EventLoop``...). ``loop.time()`` starts
    at ``start``; a timer due at ``D`` runs with ``loop.time()`` equal to ``D`` exactly (not
    rounded to ``tick``); timers with the same deadline run in the order they were filed.

    With a ``seed`` (an int >= 0) the clock is fuzzed (a :class:`FuzzedLoopFactory`): each jump
    to a timer lands up to ``jitter`` seconds late (default: 3 ticks), and after a pass of
    timers the loop stalls, with probability ``stall_rate``, for up to ``stall`` seconds. A
    negative, NaN or non-number bound or rate is a ValueError / TypeError naming it.

    ``max_batch`` bounds the due callbacks the wheel runs per loop iteration, as
    :func:`aiowheel.loop_factory` takes it (a positive int, or None for no bound): more due at
    once run over the next iterations, ``max_batch`` at a time, the clock staying at their
    deadline meanwhile (the loop is not idle while a chunk waits).

    >>> asyncio.run(main(), loop_factory=aiowheel.testing.virtual_loop_factory())
    >>> asyncio.run(main(), loop_factory=aiowheel.testing.virtual_loop_factory(seed=7))
    >>> asyncio.run(main(), loop_factory=aiowheel.testing.virtual_loop_factory(max_batch=64))
    """
    return _factory(
        "virtual_loop_factory()",
        base,
        autojump,
        start,
        tick,
        seed,
        jitter,
        stall_rate,
        stall,
        max_batch,
    )


def clock_of(loop: asyncio.AbstractEventLoop | None = None) -> VirtualClock | None:
    """The virtual clock of ``loop`` (default: the running loop); None if it is not on one.

    >>> aiowheel.testing.clock_of().now
    """
    if loop is None or not isinstance(loop, asyncio.AbstractEventLoop):
        loop = loop_of(loop, "clock_of()")  # the running loop, or a clear error
    state = state_of(loop)
    clock: VirtualClock | None = None if state is None else state.virtual
    return clock if isinstance(clock, VirtualClock) else None


async def advance(seconds: float) -> None:
    """Move the running loop's virtual clock ``seconds`` forward and return when it is there.

    Each timer due on the way runs at its own deadline, in deadline order, and the tasks it
    wakes run before the clock moves past that deadline. ValueError for a negative or NaN
    ``seconds``; RuntimeError if the running loop is not on a virtual clock.

    >>> await aiowheel.testing.advance(30)   # every timer due in the next 30 s has run
    """
    clock = clock_of(asyncio.get_running_loop())
    if clock is None:
        raise RuntimeError(
            "advance() needs a loop on a virtual clock (aiowheel.testing.virtual_loop_factory, "
            "aiowheel.testing.run, or pytest --aiowheel-clock=virtual); the running loop is "
            "on real time"
        )
    await clock.advance(seconds)


def run(
    main: Coroutine[Any, Any, _T],
    *,
    base: type[asyncio.AbstractEventLoop] | None = None,
    autojump: bool | float = True,
    start: float = 0.0,
    debug: bool | None = None,
    seed: int | None = None,
    jitter: float | None = None,
    stall_rate: float = 0.0,
    stall: float = DEFAULT_STALL,
    max_batch: int | None = _DEFAULT_MAX_BATCH,
) -> _T:
    """Run ``main`` like :func:`aiowheel.run`, on a loop with a virtual clock (fuzzed with a
    ``seed``: ``jitter``, ``stall_rate`` and ``stall`` as :func:`virtual_loop_factory` takes
    them; ``max_batch`` too).

    >>> aiowheel.testing.run(main())                 # sleeps and timeouts take no wall time
    >>> aiowheel.testing.run(main(), seed=7)         # timers late, as seed 7 says
    >>> aiowheel.testing.run(main(), max_batch=64)   # at most 64 due callbacks an iteration
    """
    return run_refusing(
        "testing.run()",
        main,
        debug,
        lambda: _factory(
            "testing.run()",
            base,
            autojump,
            start,
            _DEFAULT_TICK,
            seed,
            jitter,
            stall_rate,
            stall,
            max_batch,
        ),
    )


def seeds() -> Any:
    """A Hypothesis strategy for seeds (ints from 0 to 2**32 - 1, shrinking towards 0), so a
    failing schedule shrinks to a small seed and ``@example(seed=...)`` pins one.

    >>> @hypothesis.given(seed=aiowheel.testing.seeds())
    ... def test_retry(seed):
    ...     aiowheel.testing.run(retry(), seed=seed)

    Hypothesis is imported when this is called (it is no dependency of aiowheel).
    """
    from hypothesis import strategies

    return strategies.integers(min_value=0, max_value=2**32 - 1)


class NondeterminismError(AssertionError):
    """Two runs with one seed did not run the same timers at the same virtual times."""


_WHY_NOT: Final = (
    "a program runs the same under one seed only if nothing outside the loop decides what it "
    "does: look for threads (to_thread, executors) racing the loop, real I/O (sockets, files, "
    "subprocesses), random or uuid without a seed, the wall clock (time.time, datetime.now), "
    "and iteration over sets of objects (hash order of ids)"
)


def first_divergence(
    first: list[tuple[float, str]], second: list[tuple[float, str]], *, context: int = 3
) -> str | None:
    """Where two traces (:meth:`VirtualClock.trace`) part, with ``context`` events before it
    from both; None if they are equal."""
    if isinstance(context, bool) or not isinstance(context, int):
        raise TypeError(
            f"first_divergence(): context must be an int >= 0, got {type(context).__name__}"
        )
    if context < 0:
        raise ValueError(f"first_divergence(): context must be an int >= 0, got {context!r}")
    for index in range(max(len(first), len(second))):
        a = first[index] if index < len(first) else None
        b = second[index] if index < len(second) else None
        if a != b:
            break
    else:
        return None
    lines = [f"the runs part at event {index} (of {len(first)} and {len(second)}):"]
    for label, trace in (("first run", first), ("second run", second)):
        lines.append(f"  {label}:")
        for at in range(max(0, index - context), min(len(trace), index + context + 1)):
            mark = ">" if at == index else " "
            when, origin = trace[at]
            lines.append(f"  {mark} [{at}] t={when:.6f} {origin}")
        if index >= len(trace):
            lines.append(f"  > [{index}] (the run ended here)")
    return "\n".join(lines)


def check_determinism(
    main: Callable[[], Coroutine[Any, Any, Any]],
    *,
    seed: int = 0,
    base: type[asyncio.AbstractEventLoop] | None = None,
    jitter: float | None = None,
    stall_rate: float = 0.0,
    stall: float = DEFAULT_STALL,
    max_batch: int | None = _DEFAULT_MAX_BATCH,
) -> list[tuple[float, str]]:
    """Run ``main()`` twice on a virtual clock fuzzed with ``seed`` and compare the traces:
    :class:`NondeterminismError` naming the first difference (with both runs' context) if the
    timers did not run at the same virtual times from the same lines; the trace otherwise.
    ``base`` and ``max_batch`` as :func:`virtual_loop_factory` takes them.

    >>> aiowheel.testing.check_determinism(lambda: client(retries=3), seed=11)
    """
    if not callable(main):
        raise TypeError(
            "check_determinism(): main must be a function returning a coroutine (it runs "
            f"twice), got {type(main).__name__}"
        )
    traces = []
    factory = _factory(
        "check_determinism()",
        base,
        True,
        0.0,
        _DEFAULT_TICK,
        seed,
        jitter,
        stall_rate,
        stall,
        max_batch,
    )
    for _ in range(2):
        with asyncio.Runner(loop_factory=factory) as runner:
            clock = clock_of(runner.get_loop())
            assert clock is not None
            trace = clock.trace()
            runner.run(main())
        traces.append(trace)
    where = first_divergence(*traces)
    if where is not None:
        raise NondeterminismError(f"seed {seed}: not deterministic: {where}\n{_WHY_NOT}")
    return traces[0]
