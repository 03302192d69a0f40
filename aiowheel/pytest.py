"""A pytest plugin that runs every asyncio test of a suite on loop mode, opted into per run:

    pytest -p aiowheel.pytest                          # asyncio's default loop as the base
    pytest -p aiowheel.pytest --aiowheel-base uvloop   # or rloop, zuvloop, auto

Nothing in the suite changes. pytest-asyncio (1.x) tests run on loop-mode loops through its
public ``pytest_asyncio_loop_factories`` hook; anyio tests (anyio's own pytest plugin) on the
asyncio backend get a ``loop_factory`` in their backend options: the plugin's
``anyio_backend`` fixture overrides anyio's default and takes its value (``"asyncio"``, or
``("asyncio", options)``; ``use_uvloop=True`` becomes uvloop as the base), and backends given
as parameters (``parametrize("anyio_backend", ...)``, a conftest fixture's ``params``) get the
same change in each collected test's parameters. trio tests run unchanged.

A suite with opinions keeps them: a conftest that implements
``pytest_asyncio_loop_factories`` is asked first and wins, a conftest ``anyio_backend``
fixture that returns a constant (not a parameter) replaces the plugin's (put
``aiowheel.loop_factory()`` in either instead), and an anyio backend that already names a
``loop_factory`` keeps it.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any

import pytest

from ._loop import LoopFactory, loop_factory
from .loops import BASES, auto_base, base_class

__all__ = [
    "on_loop_mode",
    "pytest_addoption",
    "pytest_asyncio_loop_factories",
    "pytest_collection_modifyitems",
    "pytest_configure",
    "pytest_report_header",
]

_factories: dict[str, LoopFactory] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--aiowheel-base``: the event loop under the wheel."""
    parser.getgroup("aiowheel").addoption(
        "--aiowheel-base",
        choices=(*BASES, "auto"),
        default="asyncio",
        help="with -p aiowheel.pytest: the base loop of the loop-mode loops (default: asyncio)",
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
    """Check the base now (a clear usage error), and put the anyio override in place."""
    _factory(config)
    if config.pluginmanager.hasplugin("asyncio") and not hasattr(
        config.hook, "pytest_asyncio_loop_factories"
    ):
        from importlib.metadata import version

        raise pytest.UsageError(
            "aiowheel.pytest needs pytest-asyncio 1.4 or newer, for its loop factories hook "
            f"(installed: {version('pytest-asyncio')}): pip install -U 'pytest-asyncio>=1.4'"
        )
    # Registered now, after the plugins pytest loads from entry points (anyio's among them),
    # so that this anyio_backend overrides anyio's default one.
    config.pluginmanager.register(_anyio_plugin(), "aiowheel-anyio")


def pytest_report_header(config: pytest.Config) -> str:
    """Say that the run is on loop mode, and on which base."""
    return f"aiowheel: asyncio tests on loop mode, base {config.getoption('aiowheel_base')}"


@pytest.hookimpl(optionalhook=True)  # pytest-asyncio may be absent: anyio suites need none
def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, LoopFactory]:
    """pytest-asyncio's hook: every asyncio test on one loop-mode loop factory."""
    return {"aiowheel": _factory(config)}


def on_loop_mode(backend: Any, factory: LoopFactory, uvloop: LoopFactory | None) -> Any:
    """An anyio backend value with the loop-mode ``loop_factory`` added where it applies."""
    name, options = (backend, {}) if isinstance(backend, str) else backend
    if name != "asyncio" or "loop_factory" in options:
        return backend
    options = dict(options)
    if options.pop("use_uvloop", False) and uvloop is not None:
        factory = uvloop
    return (name, {**options, "loop_factory": factory})


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """anyio backends given as parameters (``@pytest.mark.parametrize("anyio_backend", ...)``
    or a conftest fixture's ``params``): the same change, to each test's parameter value."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", None)
        if params is not None and "anyio_backend" in params:
            params["anyio_backend"] = _anyio_backend(config, params["anyio_backend"])


def _anyio_backend(config: pytest.Config, backend: Any) -> Any:
    uvloop = None
    if isinstance(backend, tuple) and backend[1].get("use_uvloop"):
        uvloop = _factory(config, "uvloop")
    return on_loop_mode(backend, _factory(config), uvloop)


def _anyio_plugin() -> object:
    """A plugin object holding the ``anyio_backend`` override (made here, not at module level,
    so that pytest finds it only where it is registered: after anyio's plugin)."""

    @pytest.fixture(scope="module", name="anyio_backend")
    def anyio_backend(anyio_backend: Any, request: pytest.FixtureRequest) -> Any:
        """anyio's default backend for the module, on loop mode where it is asyncio."""
        return _anyio_backend(request.config, anyio_backend)

    return types.SimpleNamespace(anyio_backend=anyio_backend)
