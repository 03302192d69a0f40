"""The pytest plugin's options and markers: the table ``pytest --help`` shows, and reading the
values back, checked.

:mod:`aiowheel.pytest` adds these options from its ``pytest_addoption`` hook; each option is
one row of :data:`OPTIONS` (or :data:`INI`, the ini lines), read top to bottom as the help lists
them. The checks of what a run gives (``--aiowheel-max-batch`` and its ini line, the ints and
numbers of the fuzzing options) raise the usage errors that name the option. A room of its own:
the other rooms of the plugin (:mod:`aiowheel._plugin._factories`, :mod:`aiowheel._plugin._fuzz`,
...) read the options through it and never spell a flag's help twice, and the table, the one
long read of the plugin, is no hook's body.
"""

from __future__ import annotations

from typing import Any, Final

import pytest

from .._common import _validate
from .._loopmode._loops import BASES
from .._virtual._fuzz import DEFAULT_JITTER_TICKS, DEFAULT_STALL, fuzz_number

__all__ = [
    "BATCH",
    "CLOCKS",
    "FUZZ_MARKER",
    "INI",
    "LINGERING",
    "MARKER",
    "OPTIONS",
    "TICK",
    "add_options",
    "declare_markers",
    "int_option",
    "max_batch",
    "number_option",
    "version",
]

CLOCKS: Final = ("real", "virtual")
"""The values ``--aiowheel-clock`` and the ``aiowheel_clock`` marker take."""

LINGERING: Final = ("off", "warn", "error")
"""The values ``--aiowheel-lingering`` takes."""

MARKER: Final = "aiowheel_clock"
"""The marker that puts one test on a virtual clock (or on the real one)."""

FUZZ_MARKER: Final = "aiowheel_fuzz"
"""The marker that fuzzes one test under k seeds."""

TICK: Final = _validate.DEFAULT_TICK
"""The tick of the plugin's loops: the unit of the default jitter."""

OPTIONS: Final[tuple[tuple[str, dict[str, Any]], ...]] = (
    (
        "--aiowheel-base",
        dict(
            choices=(*BASES, "auto"),
            default="asyncio",
            help="with -p aiowheel.pytest: the base loop of the loop-mode loops (default: asyncio)",
        ),
    ),
    (
        "--aiowheel-strict",
        dict(
            action="store_true",
            default=False,
            help="with -p aiowheel.pytest: fail every asyncio test left on its own loop "
            "(a backend's own loop_factory, the suite's own loop factories hook)",
        ),
    ),
    (
        "--aiowheel-every-loop",
        dict(
            action="store_true",
            default=None,
            help="with -p aiowheel.pytest: every asyncio loop the tests make (asyncio.run, "
            "asyncio.Runner, asyncio.new_event_loop, anyio.run, blocking portals) on loop mode "
            "too (ini: aiowheel_every_loop)",
        ),
    ),
    (
        "--aiowheel-clock",
        dict(
            choices=CLOCKS,
            default=None,
            help="with -p aiowheel.pytest: 'virtual' runs every asyncio test on a virtual clock "
            "(aiowheel.testing): sleeps and timeouts take no wall time (default: real)",
        ),
    ),
    (
        "--aiowheel-max-batch",
        dict(
            metavar="N",
            default=None,
            help="with -p aiowheel.pytest: at most N due wheel callbacks per loop iteration on "
            "the loop-mode loops the plugin makes, virtual or real (default: no bound; ini: "
            "aiowheel_max_batch)",
        ),
    ),
    (
        "--aiowheel-lingering",
        dict(
            choices=LINGERING,
            default="off",
            help="with -p aiowheel.pytest: 'error' fails, 'warn' warns about, each test that "
            "leaves a timer pending on its loop-mode loop (default: off)",
        ),
    ),
    (
        "--aiowheel-seed",
        dict(
            metavar="N",
            default=None,
            help="with -p aiowheel.pytest: every asyncio test on a virtual clock fuzzed with "
            "seed N (timers late, never early; replays a failing seed)",
        ),
    ),
    (
        "--aiowheel-jitter",
        dict(
            metavar="SECONDS",
            default=None,
            help="with a seed: how late a jump to a timer may land "
            f"(default: {DEFAULT_JITTER_TICKS} ticks, {DEFAULT_JITTER_TICKS * TICK:g} s)",
        ),
    ),
    (
        "--aiowheel-stall-rate",
        dict(
            metavar="P",
            default=None,
            help="with a seed: the chance that the loop stalls after a pass of timers (default: 0)",
        ),
    ),
    (
        "--aiowheel-stall",
        dict(
            metavar="SECONDS",
            default=None,
            help=f"with a seed: a stall's longest length (default: {DEFAULT_STALL:g} s)",
        ),
    ),
    (
        "--aiowheel-fuzz",
        dict(
            metavar="K",
            default=None,
            help="with -p aiowheel.pytest: run every asyncio test on a virtual clock under K "
            "seeds, stopping at the first that fails and printing it",
        ),
    ),
    (
        "--aiowheel-check-determinism",
        dict(
            action="store_true",
            default=False,
            help="with -p aiowheel.pytest: run every asyncio test twice per seed on a virtual "
            "clock and fail it where the two runs' timers part",
        ),
    ),
)
"""The plugin's command-line options, in the order ``pytest --help`` lists them: (flag,
keywords of ``addoption``)."""

INI: Final[tuple[tuple[str, dict[str, Any]], ...]] = (
    (
        "aiowheel_every_loop",
        dict(type="bool", default=False, help="with -p aiowheel.pytest: as --aiowheel-every-loop"),
    ),
    (
        "aiowheel_max_batch",
        dict(type="string", default="", help="with -p aiowheel.pytest: as --aiowheel-max-batch"),
    ),
)
"""The plugin's ini options: (name, keywords of ``addini``)."""


def add_options(parser: pytest.Parser) -> None:
    """Add :data:`OPTIONS` to the ``aiowheel`` group of ``parser``, and :data:`INI`."""
    group = parser.getgroup("aiowheel")
    for flag, keywords in OPTIONS:
        group.addoption(flag, **keywords)
    for name, keywords in INI:
        parser.addini(name, **keywords)


def declare_markers(config: pytest.Config) -> None:
    """Declare the ``aiowheel_clock`` and ``aiowheel_fuzz`` markers (``--strict-markers``)."""
    config.addinivalue_line(
        "markers",
        f"{MARKER}(kind='virtual', *, autojump=True, start=0.0): with -p aiowheel.pytest, "
        "run this asyncio test on a virtual clock ('virtual') or on the real one ('real')",
    )
    config.addinivalue_line(
        "markers",
        f"{FUZZ_MARKER}(k=10, *, jitter=None, stall_rate=None, stall=None): with -p "
        "aiowheel.pytest, run this asyncio test on a virtual clock under k seeds, stopping at "
        "the first that fails (the seed is printed; --aiowheel-seed replays it)",
    )


BATCH: pytest.StashKey[int | None] = pytest.StashKey()
"""The run's ``max_batch``, once :func:`max_batch` has read it."""


def max_batch(config: pytest.Config) -> int | None:
    """``--aiowheel-max-batch`` (else the ini option), checked as ``loop_factory`` checks its
    ``max_batch``: a usage error naming the option otherwise. Read once per run."""
    if BATCH in config.stash:
        return config.stash[BATCH]
    option = config.getoption("aiowheel_max_batch")
    name = "--aiowheel-max-batch" if option is not None else "aiowheel_max_batch"
    text = str(option if option is not None else config.getini("aiowheel_max_batch")).strip()
    value: object = None
    if text and text.lower() != "none":
        try:
            value = int(text)
        except ValueError:
            raise pytest.UsageError(
                f"aiowheel.pytest: {name}: max_batch must be a positive int or None, got {text!r}"
            ) from None
    try:
        batch = _validate.max_batch(value, name)
    except (TypeError, ValueError) as exc:
        raise pytest.UsageError(f"aiowheel.pytest: {exc}") from None
    config.stash[BATCH] = batch
    return batch


def int_option(name: str, text: object, least: int) -> int | None:
    """An int option's value (None if not given), or a ValueError naming ``name``."""
    if text is None:
        return None
    value: int | None = None
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    elif isinstance(text, str) and text.strip().lstrip("-").isdigit():
        value = int(text)
    if value is None or value < least:
        raise ValueError(f"{name} must be an int >= {least}, got {text!r}")
    return value


def number_option(name: str, text: str, most: float | None) -> float:
    """A number option's value, or a ValueError naming ``name``."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds, got {text!r}") from None
    return fuzz_number(name, value, at_most=most)


def version(distribution: str) -> str:
    """The installed version of ``distribution``, for a usage error ("unknown" if none)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed_version

    try:
        return installed_version(distribution)
    except PackageNotFoundError:
        return "unknown"
