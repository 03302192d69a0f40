"""The base loops loop mode runs on, one record each: everything aiowheel knows about a base.

Why a room of its own. A base loop's facts (where its class comes from, the pip extra that
installs it, the Python its wheels need, how late its heap must get a near timer, the debug
checks it makes, how a virtual clock sees it idle, whether ``auto`` picks it, the defects loop
mode works around) were kept in five modules, each with its own table keyed by the base's name
or module. Here they are one :class:`Base` per loop, in :data:`RECORDS`, and every other place
reads them: :mod:`aiowheel.loops` (``BASES``, the factories, ``auto``),
:mod:`aiowheel._loopmode._loop` (the threshold rule, by :func:`near_pad`),
:mod:`aiowheel._virtual._virtual` (the resolver pool, how the idle probe comes back),
:mod:`aiowheel.granian`, the bench and the tests. Adding a base is one record here plus its tests
(``tests/loop_mode/test_loops.py`` checks that every record is complete and that every reader agrees
with it).

Nothing here imports a base loop library: a record names its module, which
:func:`aiowheel.loops.base_class` imports when the base is first asked for.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "AUTO",
    "RECORDS",
    "UNMEASURED_PAD",
    "Base",
    "by_name",
    "near_pad",
    "of_class",
    "of_module",
]


@dataclass(frozen=True, slots=True)
class Base:
    """One base loop, as loop mode and everything around it sees it."""

    name: str
    """Its name in :data:`aiowheel.loops.BASES` (``--base``, ``--loop``, ``@pytest.mark.bases``)."""

    module: str | None
    """The library to import for its class (None: asyncio's default loop, nothing to import).
    Also how its classes are recognised: a class whose module is this one or inside it."""

    class_name: str | None
    """The class to take from :attr:`module` where the library has no ``new_event_loop``
    (bracio's ``BracioLoop``); None: the class of the loop the library's ``new_event_loop()``
    makes, asked of a probe loop (not every library exports it under one name)."""

    factory: str
    """The name of its zero-argument factory in :mod:`aiowheel.loops`."""

    extra: str | None
    """The pip extra that installs it (``aiowheel[extra]``); None: it comes with Python."""

    python: str | None
    """The first Python its wheels are for, where that is later than aiowheel's 3.11."""

    pad: float
    """How much later than asked a near timer is filed on its heap so that it never runs
    before its deadline by the loop's own clock (0: an exact heap). Measured with 20,000
    timers 0-9 ms ahead, half ``call_at`` and half ``call_later`` (the loop-mode tests'
    never-early test); see :attr:`defects`. A base with no record gets
    :data:`UNMEASURED_PAD`. A base that subclasses ``asyncio.BaseEventLoop`` has asyncio's
    heap, which is exact: 0 whatever its record says."""

    debug_checks: Literal["asyncio", "thread"]
    """What its ``call_at`` checks in debug mode, and loop mode with it: ``asyncio``'s three
    checks (another thread, a coroutine function, a non-callable; asyncio's
    ``_check_thread`` / ``_check_callback``), or the thread only (uvloop's)."""

    libuv: bool
    """Whether it runs on libuv: it resolves names in libuv's thread pool, which a virtual
    clock watches (:mod:`aiowheel._virtual._virtual`), and every iteration polls its I/O."""

    requeue: Literal["call_soon", "native_call_later", "timer"]
    """How a virtual clock's idle probe comes back to the loop (:mod:`aiowheel._virtual._virtual`):
    ``call_soon`` where every iteration polls I/O (libuv's); ``native_call_later``, rloop's
    native ``_call_later`` of 0 us, due at once, where an iteration with callbacks queued may
    skip the poll; ``timer``, one of a microsecond on its heap (bases not measured; asyncio's
    selector loops are seen idle through their selector instead)."""

    auto_rank: int | None
    """Its place in ``aiowheel.loops:auto``'s order of preference (0 first), or None: ``auto``
    never picks it (it departs from asyncio's contract on its own, or is not fast enough)."""

    all_on_the_wheel: bool
    """Whether its factory files every deadline ahead on the wheel (``threshold=0``) instead of
    leaving near timers on its heap: where its heap mishandles them (bracio 0.0.1)."""

    granian: bool
    """Whether granian's ``--loop`` offers it (a fixed list: asyncio, auto, rloop, uvloop,
    winloop): :mod:`aiowheel.granian` registers a loop-mode builder under its name."""

    defects: tuple[str, ...]
    """What it does that asyncio's loop does not, as measured here (the docs' "Other bases"
    section of the loop-mode page, and the performance page), and what loop mode does about it."""


#: A base with no record (or a class none of them makes) gets a millisecond: libuv's
#: granularity, the safe guess.
UNMEASURED_PAD: Final = 1e-3

#: Every base loop, in :data:`aiowheel.loops.BASES`' order. The loops of 2026 (veloxloop and
#: bracio on Rust, zloop on Zig) come with the ``bench`` extra: each passed CPython's timer
#: tests under loop mode as on its own (tests/conformance). rsloop has no record: its loop
#: class does not derive from asyncio.AbstractEventLoop, which loop mode asks of a base.
RECORDS: Final[tuple[Base, ...]] = (
    Base(
        name="asyncio", module=None, class_name=None, factory="asyncio_loop", extra=None,
        python=None, pad=0.0, debug_checks="asyncio", libuv=False, requeue="timer",
        auto_rank=None, all_on_the_wheel=False, granian=True,
        defects=(
            "none early: its heap runs a handle at most its clock's resolution (1 ns on Linux) "
            "before the deadline, and the callback's own loop.time() is always later",
        ),
    ),
    Base(
        name="uvloop", module="uvloop", class_name=None, factory="uvloop", extra="uvloop",
        python=None, pad=1e-3, debug_checks="thread", libuv=True, requeue="call_soon",
        auto_rank=1, all_on_the_wheel=False, granian=True,
        defects=(
            "its heap works in whole milliseconds: it turns a deadline into a delay rounded to "
            "the nearest, so about half its timers run early, by up to 0.5 ms (the pad: 1 ms)",
            "its debug mode checks only the thread of call_at, not the callback",
        ),
    ),
    Base(
        name="rloop", module="rloop", class_name=None, factory="rloop", extra="rloop",
        python=None, pad=1e-6, debug_checks="thread", libuv=False,
        requeue="native_call_later", auto_rank=None, all_on_the_wheel=False, granian=True,
        defects=(
            "a few timers in 20,000 run early, by under 0.4 us: a microsecond clock (the pad: "
            "1 us)",
            "exception handlers called with one argument, no debug mode, its self-pipe left "
            "open at close(): never picked by auto",
            "an iteration with callbacks queued may skip the I/O poll for up to 250 us after "
            "the last one (a due timer makes it poll)",
        ),
    ),
    Base(
        name="zuvloop", module="zuvloop", class_name=None, factory="zuvloop", extra="zuvloop",
        python="3.14", pad=1e-6, debug_checks="thread", libuv=True, requeue="call_soon",
        auto_rank=0, all_on_the_wheel=False, granian=False,
        defects=(
            "none early in 100,000, but its timer code is native and not checked here: rloop's "
            "microsecond pad, which costs nothing anyone can see",
        ),
    ),
    Base(
        name="veloxloop", module="veloxloop", class_name=None, factory="veloxloop",
        extra="bench", python=None, pad=1e-3, debug_checks="thread", libuv=False,
        requeue="timer", auto_rank=None, all_on_the_wheel=False, granian=False,
        defects=(
            "its own timers ran early in the bench's fire storms (454 of 500; half by 0.4 ms or "
            "more) and in one run of 20,000 here (168, by up to 0.9 ms; none in 9 runs after): "
            "the millisecond pad",
            "its call_soon returns no handle (0.2)",
            "its close() closes a running loop (0.2; loop mode refuses, as asyncio does)",
            "its run_in_executor returns a future without remove_done_callback, so "
            "asyncio.wait_for on it fails (0.2)",
            "virtual time (aiowheel.testing) does not see its worker threads and I/O as busy: "
            "11 of the suite's virtual-clock tests fail over it, so it is not a virtual base",
            "it subclasses asyncio.AbstractEventLoopPolicy at import, deprecated from 3.14 "
            "(its warning is silenced at import)",
        ),
    ),
    Base(
        name="zloop", module="zloop", class_name=None, factory="zloop", extra="bench",
        python="3.12", pad=1e-6, debug_checks="thread", libuv=False, requeue="timer",
        auto_rank=None, all_on_the_wheel=False, granian=False,
        defects=("none early in 170,000: the microsecond pad",),
    ),
    Base(
        name="bracio", module="bracio", class_name="BracioLoop", factory="bracio",
        extra="bench", python=None, pad=0.0, debug_checks="asyncio", libuv=False,
        requeue="timer", auto_rank=None, all_on_the_wheel=True, granian=False,
        defects=(
            "it subclasses asyncio.BaseEventLoop: asyncio's heap, no pad (none early in 170,000 "
            "on its native heap)",
            "0.0.1 runs a handle after it was cancelled, its timers' and its call_soon's alike: "
            "each reports 'Exception in callback None()' to the loop's exception handler "
            "(37,342 reports for 50,000 cancelled 5 ms timers; 0 with every one on the wheel, "
            "where a cancel holds: python -m bench.cancels); its factory puts every deadline "
            "ahead on the wheel",
        ),
    ),
)  # fmt: skip

#: ``aiowheel.loops:auto``'s order of preference: the records it may pick, first rank first.
AUTO: Final = tuple(
    sorted((record for record in RECORDS if record.auto_rank is not None),
           key=lambda record: record.auto_rank or 0)
)  # fmt: skip

_BY_NAME: Final = {record.name: record for record in RECORDS}
_BY_MODULE: Final = {record.module: record for record in RECORDS if record.module is not None}


def by_name(name: str) -> Base | None:
    """The record of the base named ``name``, or None."""
    return _BY_NAME.get(name)


def of_module(module: str) -> Base | None:
    """The record of the base whose library defines module ``module`` (``rloop.loop``), or
    None (asyncio's own modules included: its record names no library)."""
    return _BY_MODULE.get(module.partition(".")[0])


def of_class(cls: type) -> Base | None:
    """The record of the base ``cls`` is, or subclasses (a subclass of ``uvloop.Loop`` keeps
    uvloop's heap): the first class of its MRO a base's library defines; None if none does."""
    for klass in cls.__mro__:
        record = of_module(klass.__module__)
        if record is not None:
            return record
    return None


def near_pad(cls: type[asyncio.AbstractEventLoop]) -> float:
    """How much later than asked a near timer goes on the heap of base class ``cls``: its
    record's :attr:`Base.pad`; none on asyncio's heap (a subclass of ``asyncio.BaseEventLoop``
    is exact, whatever its record), :data:`UNMEASURED_PAD` on a base with no record. Loop mode
    reads it once per loop, when it is made."""
    if issubclass(cls, asyncio.BaseEventLoop):
        return 0.0
    record = of_class(cls)  # a subclass of uvloop.Loop keeps uvloop's heap
    return UNMEASURED_PAD if record is None else record.pad
