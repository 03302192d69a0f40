"""The handles loop mode returns are those docs/loop-mode.md's table names ("What differs"):
an ``aiowheel.TimerHandle`` for a deadline on the wheel, on every base (a near one too, on a
base whose heap would run it early: uvloop's, rloop's); the base's own handle, exactly as the
base alone returns it, for a near deadline on asyncio's heap and a due one.

The table is read from the page itself, so the page cannot claim a type the loops do not
return (it once said every handle is an ``asyncio.TimerHandle`` "whatever the delay": on
uvloop a near timer's handle is not even an ``asyncio.Handle``).
"""

from __future__ import annotations

import asyncio
import importlib
import re
import time
from collections.abc import Callable
from typing import Any

import pytest

import aiowheel
from aiowheel._common._bases import near_pad
from tests.support import BASES, ROOT

PAGE = ROOT / "docs" / "loop-mode.md"
ROWS = {"the wheel": "far", "the base's heap": "near", "already due": "due"}


def _table() -> dict[str, dict[str, str]]:
    """The page's table: {row ("far", "near", "due"): {base name: cell}}."""
    lines = PAGE.read_text().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("| the deadline |")]
    assert starts, f"{PAGE.name} has no table of handle types ('| the deadline |')"
    start = starts[0]
    header = [cell.strip() for cell in lines[start].strip("|").split("|")]
    bases = [re.sub(r"^on (\w+)('s loop)?$", r"\1", cell) for cell in header[1:]]
    table: dict[str, dict[str, str]] = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        row = next(key for text, key in ROWS.items() if text in cells[0])
        table[row] = dict(zip(bases, cells[1:], strict=True))
    return table


TABLE = _table()


def _matches(handle: object, cell: str) -> bool:
    """Whether ``handle``'s type is the one ``cell`` names: `a.b.Name` exactly that class (as
    imported: the running build's ``aiowheel.TimerHandle``), or "rloop's `Name`" the class
    ``Name`` of that package."""
    own = re.fullmatch(r"(\w+)'s `(\w+)`", cell)
    if own is not None:
        kind = type(handle)
        return kind.__module__.partition(".")[0] == own[1] and kind.__name__ == own[2]
    dotted = re.fullmatch(r"`([\w.]+)\.(\w+)`", cell)
    assert dotted is not None, f"a cell of {PAGE.name}'s table names no class: {cell!r}"
    return type(handle) is getattr(importlib.import_module(dotted[1]), dotted[2])


def _calls(loop: asyncio.AbstractEventLoop) -> dict[str, list[Callable[[], Any]]]:
    """Each row's calls: call_later and call_at alike."""

    def cb() -> None:
        pass

    return {
        "far": [lambda: loop.call_later(1.0, cb), lambda: loop.call_at(loop.time() + 5, cb)],
        "near": [lambda: loop.call_later(0.005, cb), lambda: loop.call_at(loop.time() + 0.005, cb)],
        "due": [
            lambda: loop.call_later(0, cb),
            lambda: loop.call_later(-1, cb),
            lambda: loop.call_at(loop.time() - 1, cb),
        ],
    }


def _handles(loop: asyncio.AbstractEventLoop) -> dict[str, list[Any]]:
    """Each row's handles, made in ``loop`` as it runs (each cancelled once made)."""

    async def make() -> dict[str, list[Any]]:
        handles = {row: [call() for call in calls] for row, calls in _calls(loop).items()}
        for made in handles.values():
            for handle in made:
                handle.cancel()
        return handles

    try:
        return loop.run_until_complete(make())
    finally:
        loop.close()


def _plain(base: type[asyncio.AbstractEventLoop] | None) -> asyncio.AbstractEventLoop:
    return asyncio.new_event_loop() if base is None else base()


def _name(base: type[asyncio.AbstractEventLoop] | None) -> str:
    return next(name for name, installed in BASES.items() if installed is base)


def test_the_page_has_the_table_for_the_bases_the_suite_always_has() -> None:
    assert set(TABLE) == {"far", "near", "due"}
    assert {"asyncio", "uvloop"} <= set(TABLE["far"])


def test_each_handle_is_of_the_type_the_page_names(base: Any) -> None:
    name = _name(base)
    handles = _handles(aiowheel.new_event_loop(base))
    plain = _handles(_plain(base))
    for row, made in handles.items():
        for handle, alone in zip(made, plain[row], strict=True):
            if row == "far" or (row == "near" and _padded(base)):
                assert type(handle) is aiowheel.TimerHandle
                assert isinstance(handle, asyncio.TimerHandle)
            else:  # the base's own, as the base alone returns it
                assert type(handle) is type(alone), (row, handle)
            if name in TABLE[row]:
                assert _matches(handle, TABLE[row][name]), (row, name, handle)


def _padded(base: type[asyncio.AbstractEventLoop] | None) -> bool:
    """Whether ``base``'s heap would run a timer early (loop mode pads it there)."""
    return base is not None and near_pad(base) > 0


@pytest.mark.bases("uvloop", "rloop")
def test_on_uvloop_and_rloop_a_due_handle_is_not_an_asyncio_handle(base: Any) -> None:
    # What the page says in words below its table: a near handle is the wheel's there.
    handles = _handles(aiowheel.new_event_loop(base))
    for handle in handles["due"]:
        assert not isinstance(handle, asyncio.Handle)
        assert callable(handle.cancel)
        assert not hasattr(handle, "when")
    for handle in handles["near"]:
        assert isinstance(handle, asyncio.TimerHandle)
        assert handle.when() > 0
    assert all(callable(handle.cancelled) for handle in handles["near"])
    has_cancelled = [hasattr(handle, "cancelled") for handle in handles["due"]]
    assert has_cancelled == [_name(base) != "rloop"] * 3  # rloop's CBHandle0 has none


@pytest.mark.bases("uvloop")
def test_near_timers_of_one_deadline_run_with_the_wheel_timers_of_it(base: Any) -> None:
    # CPython's test_nested_timeouts on uvloop: the outer timeout_at's timer was on the wheel,
    # the inner one's (a millisecond of uvloop's clock later, under the threshold) on uvloop's
    # heap, filed a pad late: it ran an iteration after the outer, and never expired.
    async def main() -> list[tuple[str, bool]]:
        loop = asyncio.get_running_loop()
        log: list[tuple[str, bool]] = []
        done = loop.create_future()
        deadline = loop.time() + 0.02
        loop.call_at(deadline, lambda: log.append(("far", done.done())))
        time.sleep(0.012)  # noqa: ASYNC251 - the loop is late on purpose: now under the threshold
        loop.call_at(deadline, lambda: log.append(("near", done.done())))
        loop.call_at(deadline, lambda: loop.call_soon(done.set_result, None))
        await done
        return log

    loop = aiowheel.new_event_loop(base)
    try:
        assert loop.run_until_complete(main()) == [("far", False), ("near", False)]
    finally:
        loop.close()


def test_threshold_zero_puts_every_deadline_not_yet_passed_on_the_wheel(base: Any) -> None:
    loop = aiowheel.new_event_loop(base, threshold=0)
    handles = _handles(loop)
    plain = _handles(_plain(base))
    assert all(type(handle) is aiowheel.TimerHandle for handle in handles["far"])
    assert all(type(handle) is aiowheel.TimerHandle for handle in handles["near"])
    zero, *past = handles["due"]  # call_later(0), then two deadlines already passed
    assert type(zero) is aiowheel.TimerHandle
    assert [type(handle) for handle in past] == [type(handle) for handle in plain["due"][1:]]
