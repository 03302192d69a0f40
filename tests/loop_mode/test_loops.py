"""aiowheel.loops: zero-argument factories by base name, and factories that pickle."""

from __future__ import annotations

import asyncio
import importlib.util
import pickle
import subprocess
import sys
from typing import Any

import pytest

import aiowheel
import aiowheel.loops
from aiowheel import timer_of

INSTALLED = [
    name
    for name in aiowheel.loops.BASES
    if name == "asyncio" or importlib.util.find_spec(name) is not None
]
FACTORY = {"asyncio": "asyncio_loop"}


def _make(name: str) -> asyncio.AbstractEventLoop:
    factory = getattr(aiowheel.loops, FACTORY.get(name, name))
    loop: asyncio.AbstractEventLoop = factory()
    return loop


@pytest.mark.parametrize("name", INSTALLED)
def test_each_installed_base_makes_a_loop_mode_loop_that_runs(name: str) -> None:
    loop = _make(name)
    try:
        timer = timer_of(loop)
        assert timer is not None
        base = aiowheel.loops.base_class(name)
        if base is not None:
            assert isinstance(loop, base)
        loop.run_until_complete(asyncio.sleep(0.03))  # a wheel timer
        assert timer.stats().fired == 1
    finally:
        loop.close()


@pytest.mark.parametrize("name", INSTALLED)
def test_the_factories_pickle_by_name(name: str) -> None:
    factory = getattr(aiowheel.loops, FACTORY.get(name, name))
    assert pickle.loads(pickle.dumps(factory)) is factory


def test_auto_prefers_zuvloop_then_uvloop() -> None:
    loop = aiowheel.loops.auto()
    try:
        expected = "zuvloop" if "zuvloop" in INSTALLED else "uvloop"
        assert isinstance(loop, aiowheel.loops.base_class(expected))  # type: ignore[arg-type]
        assert timer_of(loop) is not None
    finally:
        loop.close()


@pytest.mark.bases("asyncio", "uvloop")
def test_loop_factory_pickles_and_its_copy_makes_the_same_loops(base: Any) -> None:
    factory = aiowheel.loop_factory(base, threshold=0.02)
    copy = pickle.loads(pickle.dumps(factory))
    assert copy == factory
    assert hash(copy) == hash(factory)
    loop = copy()
    original = factory()
    try:
        assert type(loop) is type(original)
        timer = timer_of(loop)
        assert timer is not None
        assert aiowheel.config_of(loop) == factory.config
        assert aiowheel.config_of(loop).threshold == 0.02  # type: ignore[union-attr]
    finally:
        loop.close()
        original.close()  # left open, it warned "unclosed event loop" in a later test's gc
    assert "threshold=0.02" in repr(factory)


def test_an_unknown_base_name_is_refused_with_the_known_ones() -> None:
    with pytest.raises(
        ValueError, match=r"^base_class\(\): unknown base loop 'trio'; known: asyncio, uvloop"
    ):
        aiowheel.loops.base_class("trio")


def test_a_missing_base_library_names_the_pip_extra() -> None:
    # A fresh interpreter in which importing rloop fails, as where it is not installed.
    code = (
        "import sys; sys.modules['rloop'] = None\n"
        "import aiowheel.loops\n"
        "try:\n"
        "    aiowheel.loops.rloop()\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert "aiowheel.loops.rloop needs rloop" in out
    assert "pip install 'aiowheel[rloop]'" in out


def test_the_bracio_factory_files_every_deadline_ahead_on_the_wheel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # bracio 0.0.1 runs handles after they are cancelled (each reports "Exception in callback
    # None()"), so its factory leaves no timer on bracio's heap. bracio comes with the bench
    # extra only: a stand-in base here (the real one runs in the test above where installed).
    class StandIn(asyncio.SelectorEventLoop):
        pass

    monkeypatch.setattr(aiowheel.loops, "base_class", lambda name: StandIn)
    loop = aiowheel.loops.bracio()
    other = aiowheel.loops.zloop()
    try:
        assert isinstance(loop, StandIn)
        config = aiowheel.config_of(loop)
        assert config is not None and config.threshold == 0.0
        near = loop.call_later(0.001, print)  # on the wheel, however near
        assert isinstance(near, aiowheel.TimerHandle)
        near.cancel()
        # The other factories keep the default: a near timer stays on the base's heap.
        other_config = aiowheel.config_of(other)
        assert other_config is not None
        assert other_config.threshold == aiowheel.LoopConfig(StandIn).threshold > 0
        assert not isinstance(other.call_later(0.001, print), aiowheel.TimerHandle)
    finally:
        loop.close()
        other.close()
