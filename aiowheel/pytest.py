"""A pytest plugin that runs every asyncio test of a suite on loop mode, opted into per run::

    pytest -p aiowheel.pytest                          # asyncio's default loop as the base
    pytest -p aiowheel.pytest --aiowheel-base uvloop   # or rloop, zuvloop, auto
    pytest -p aiowheel.pytest --aiowheel-strict        # fail asyncio tests left off loop mode

Nothing in the suite changes, and nothing a test sees changes but its event loop:

- **pytest-asyncio** (1.4+) tests run on loop-mode loops through its public
  ``pytest_asyncio_loop_factories`` hook (one factory, so test ids do not change).
- **anyio** tests (anyio's own pytest plugin) on the asyncio backend get a loop-mode
  ``loop_factory`` where anyio makes its test runner, whatever gives the test its backend:
  anyio's default ``anyio_backend`` fixture, a conftest fixture (parametrized or constant),
  ``parametrize("anyio_backend", ...)``, or a marker a conftest adds during collection. The
  ``anyio_backend`` and ``anyio_backend_options`` values a test or fixture reads stay exactly
  its own: ``anyio_backend == "asyncio"`` is still true. ``use_uvloop=True`` makes uvloop the
  base, as it makes uvloop the loop without the plugin.
- trio tests run unchanged.

Left on their own loops, and said so: a test whose backend names its own ``loop_factory``,
and pytest-asyncio tests whose loop factories come from the suite's own
``pytest_asyncio_loop_factories`` hook (a conftest's hook is asked first and wins). The run
ends with one line saying how many tests ran on loop mode, on which base, and how many were
left off and why; ``--aiowheel-strict`` makes each asyncio test left off fail, for suites that
want every one on the wheel.

What differs on loop mode is the loop's class: ``type(loop)`` is a loop-mode subclass of the
base (``isinstance(loop, uvloop.Loop)`` holds under ``--aiowheel-base uvloop``), defined in
``aiowheel._loop``, so a check of ``type(loop).__module__`` no longer reads ``"uvloop"``. That
is deliberate: the class is not uvloop's, and a suite that tells loops apart should ask
``isinstance`` (or ``aiowheel.config_of(loop)``).

How anyio is reached: anyio's plugin makes every runner, for tests and async fixtures alike,
through ``anyio.pytest_plugin.get_runner(backend_name, backend_options)``; this plugin wraps
that function for the run (and puts it back at the end), adding the ``loop_factory`` to the
options it passes on, never to the values the test holds. (0.4 rewrote the test's own
``anyio_backend`` value instead: tests saw a changed parameter, and backends a conftest marked
late were missed.)
"""

from __future__ import annotations

import contextlib
import inspect
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from ._loop import LoopFactory, loop_factory
from .loops import BASES, auto_base, base_class, installed

__all__ = [
    "pytest_addoption",
    "pytest_asyncio_loop_factories",
    "pytest_configure",
    "pytest_report_header",
    "pytest_runtest_call",
    "pytest_terminal_summary",
    "pytest_unconfigure",
    "summary_line",
]

# pytest-asyncio's name for the parameter that gives a test its loop factory.
_PYTEST_ASYNCIO_FACTORY = "_asyncio_loop_factory"

_factories: dict[str, LoopFactory] = {}
_tally: pytest.StashKey[Counter[tuple[str, str]]] = pytest.StashKey()
_restore: pytest.StashKey[Callable[[], None]] = pytest.StashKey()


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--aiowheel-base`` (the event loop under the wheel) and ``--aiowheel-strict``."""
    group = parser.getgroup("aiowheel")
    group.addoption(
        "--aiowheel-base",
        choices=(*BASES, "auto"),
        default="asyncio",
        help="with -p aiowheel.pytest: the base loop of the loop-mode loops (default: asyncio)",
    )
    group.addoption(
        "--aiowheel-strict",
        action="store_true",
        default=False,
        help="with -p aiowheel.pytest: fail every asyncio test left on its own loop "
        "(a backend's own loop_factory, the suite's own loop factories hook)",
    )


def _factory(config: pytest.Config, base: str | None = None) -> LoopFactory:
    name = base or str(config.getoption("aiowheel_base"))
    found = _factories.get(name)
    if found is None:
        if name == "auto":
            found = loop_factory(auto_base())
        else:
            try:
                found = loop_factory(base_class(name))
            except ImportError as exc:
                raise pytest.UsageError(str(exc)) from exc
        _factories[name] = found
    return found


def pytest_configure(config: pytest.Config) -> None:
    """Check the base now (a clear usage error), and wrap anyio's runner factory."""
    _factory(config)
    if config.pluginmanager.hasplugin("asyncio") and not hasattr(
        config.hook, "pytest_asyncio_loop_factories"
    ):
        raise pytest.UsageError(
            "aiowheel.pytest needs pytest-asyncio 1.4 or newer, for its loop factories hook "
            f"(installed: {_version('pytest-asyncio')}): pip install -U 'pytest-asyncio>=1.4'"
        )
    config.stash[_tally] = Counter()
    anyio_plugin = config.pluginmanager.get_plugin("anyio")
    if anyio_plugin is not None:
        config.stash[_restore] = _wrap_anyio(anyio_plugin, config)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Put anyio's runner factory back."""
    restore = config.stash.get(_restore, None)
    if restore is not None:
        restore()


def _wrap_anyio(plugin: Any, config: pytest.Config) -> Callable[[], None]:
    """Wrap ``plugin.get_runner`` (anyio's pytest plugin module); returns the undo."""
    original = getattr(plugin, "get_runner", None)
    if original is None or list(inspect.signature(original).parameters)[:2] != [
        "backend_name",
        "backend_options",
    ]:
        raise pytest.UsageError(
            "aiowheel.pytest: this anyio's pytest plugin has no "
            "get_runner(backend_name, backend_options) to put loop mode under "
            f"(anyio {_version('anyio')}); anyio 4.4 or newer has it"
        )

    @contextlib.contextmanager
    def get_runner(backend_name: str, backend_options: dict[str, Any]) -> Iterator[Any]:
        options = backend_options or {}
        if backend_name == "asyncio" and options.get("loop_factory") is None:
            base = "uvloop" if options.get("use_uvloop") else None
            options = {**options, "loop_factory": _factory(config, base)}
        with original(backend_name, options) as runner:
            yield runner

    plugin.get_runner = get_runner

    def restore() -> None:
        plugin.get_runner = original

    return restore


def _version(distribution: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return "unknown"


def pytest_report_header(config: pytest.Config) -> str:
    """Say that the run is on loop mode, and on which base."""
    base = config.getoption("aiowheel_base")
    strict = ", strict" if config.getoption("aiowheel_strict") else ""
    return f"aiowheel: asyncio tests on loop mode, base {base}{strict}"


@pytest.hookimpl(optionalhook=True)  # pytest-asyncio may be absent: anyio suites need none
def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, LoopFactory]:
    """pytest-asyncio's hook: every asyncio test on one loop-mode loop factory."""
    return {"aiowheel": _factory(config)}


def _where(item: pytest.Item) -> tuple[str, str] | None:
    """Where ``item`` runs: ("loop mode", base name) or ("left off", why); None for a test
    that neither pytest-asyncio nor anyio runs."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    if _PYTEST_ASYNCIO_FACTORY in params:
        factory = params[_PYTEST_ASYNCIO_FACTORY]
        if isinstance(factory, LoopFactory) and factory in _factories.values():
            return ("loop mode", _base_name(factory))
        return ("left off", "own loop factories hook")
    backend = getattr(item, "funcargs", {}).get("anyio_backend")
    if not backend or not inspect.iscoroutinefunction(getattr(item, "obj", None)):
        return None
    name, options = (backend, {}) if isinstance(backend, str) else backend
    if name != "asyncio":
        return ("left off", name)  # trio: not asyncio, never an error
    if options.get("loop_factory") is not None:
        return ("left off", "own loop_factory")
    base = "uvloop" if options.get("use_uvloop") else None
    return ("loop mode", _base_name(_factory(item.config, base)))


def _base_name(factory: LoopFactory) -> str:
    """The name of ``factory``'s base, as ``--aiowheel-base`` takes it ("auto" resolved)."""
    base = factory.config.base
    for name, installed_base in installed().items():
        if installed_base is base:
            return name
    return "asyncio" if base.__module__.startswith("asyncio.") else base.__qualname__


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Count where each async test runs; under ``--aiowheel-strict``, fail one left off."""
    where = _where(item)
    if where is not None:
        item.config.stash[_tally][where] += 1
        kind, why = where
        if (
            kind == "left off"
            and why.startswith("own ")
            and item.config.getoption("aiowheel_strict")
        ):
            raise pytest.fail.Exception(
                f"aiowheel --aiowheel-strict: this asyncio test is left on its own loop ({why})",
                pytrace=False,
            )
    return (yield)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """One line: how many tests ran on loop mode, on which base; how many were left off, why."""
    tally: Counter[tuple[str, str]] = config.stash.get(_tally, Counter())
    terminalreporter.write_line(summary_line(tally))


def summary_line(tally: Mapping[tuple[str, str], int]) -> str:
    """The run's line, from counts of (``"loop mode"``, base) and (``"left off"``, why):
    ``aiowheel: 225 tests on loop mode (asyncio 225); 411 left off (own loop_factory 221,
    trio 190)``."""
    on = {base: n for (kind, base), n in tally.items() if kind == "loop mode"}
    off = {why: n for (kind, why), n in tally.items() if kind == "left off"}
    line = f"aiowheel: {sum(on.values())} tests on loop mode"
    if on:
        line += " (" + ", ".join(f"{base} {n}" for base, n in sorted(on.items())) + ")"
    line += f"; {sum(off.values())} left off"
    if off:
        line += " (" + ", ".join(f"{why} {n}" for why, n in sorted(off.items())) + ")"
    return line
