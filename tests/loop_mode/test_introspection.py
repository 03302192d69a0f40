"""What asyncio offers around the loop, on loop-mode loops: the REPL (``python -m aiowheel``),
3.14's call-graph introspection (``asyncio.capture_call_graph``, ``python -m asyncio ps`` and
``pstree``) and eager task factories (3.12+).

A task sleeping on a wheel timer awaits the same future as on the base loop: only who resolves
it differs. So each introspection is compared with the base loop's own output.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

import aiowheel
import aiowheel.loops
from aiowheel import timer_of
from tests.support import BASES, ROOT, Base, run_python

needs_314 = pytest.mark.skipif(sys.version_info < (3, 14), reason="new in Python 3.14")


def run_on(base: Base, wheel: bool, main: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """Run ``main()`` on a loop-mode loop over ``base``, or on ``base`` itself."""
    if wheel:
        return aiowheel.run(main(), base=base)
    factory: Callable[[], asyncio.AbstractEventLoop] = base or asyncio.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main())


# -- the REPL -----------------------------------------------------------------------------------


@pytest.mark.parametrize("base_name", ["asyncio", "uvloop", "auto"])
def test_repl_runs_top_level_await_on_a_loop_mode_loop(base_name: str) -> None:
    lines = [
        "import aiowheel",
        "print('LOOP', type(asyncio.get_running_loop()).__name__)",
        "await asyncio.sleep(0.05)",
        "print('FIRED', aiowheel.get_timer().stats().fired)",
    ]
    proc = run_python(
        ["-m", "aiowheel", "--base", base_name],
        "\n".join(lines) + "\n",
        PYTHON_BASIC_REPL="1",
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    assert "asyncio REPL" in out
    base = aiowheel.loops.auto_base() if base_name == "auto" else BASES[base_name]
    loop_class = "Wheel" + (base or asyncio.SelectorEventLoop).__name__.lstrip("_")
    assert f"LOOP {loop_class}" in out
    assert "FIRED 1" in out  # the 50 ms sleep was a wheel timer, and it fired
    assert "Traceback" not in out


@pytest.mark.parametrize("base_name", ["asyncio", "auto"])
def test_repl_makes_its_loops_with_the_bases_own_factory(
    base_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The base's factory of aiowheel.loops, so its record's rules hold (bracio's threshold 0).
    from aiowheel import __main__ as repl

    ran: list[str] = []
    monkeypatch.setattr(asyncio, "new_event_loop", asyncio.new_event_loop)
    monkeypatch.setattr(repl.runpy, "run_module", lambda name, **_: ran.append(name))
    monkeypatch.setattr(sys, "argv", sys.argv[:])
    repl.main(["--base", base_name])
    assert ran == ["asyncio"]
    assert asyncio.new_event_loop is aiowheel.loops.factory(base_name)


def test_repl_refuses_an_unknown_base() -> None:
    proc = run_python(["-m", "aiowheel", "--base", "trio"])
    assert proc.returncode == 2
    assert "invalid choice: 'trio'" in proc.stderr


# -- eager task factories (3.12+) ---------------------------------------------------------------


@pytest.mark.skipif(sys.version_info < (3, 12), reason="asyncio.eager_task_factory is 3.12+")
@pytest.mark.bases("asyncio", "uvloop")
def test_eager_tasks_sleep_and_time_out_on_the_wheel(base: Base) -> None:
    async def main() -> tuple[list[str], int | None]:
        loop = asyncio.get_running_loop()
        loop.set_task_factory(asyncio.eager_task_factory)  # type: ignore[attr-defined]
        steps: list[str] = []

        async def child() -> None:
            steps.append("child started")
            try:
                async with asyncio.timeout(0.03):
                    await asyncio.sleep(10)
            except TimeoutError:
                steps.append("timed out")

        coro = child()
        try:
            task = asyncio.create_task(coro)
        except TypeError:
            coro.close()  # the factory refused it (uvloop on 3.13.0): it will never run
            # ... and would refuse the runner's shutdown_asyncgens() too, leaving it unawaited
            loop.set_task_factory(None)
            raise
        steps.append("create_task returned")
        timer = timer_of(loop)
        pending = None if timer is None else timer.stats().pending
        await task
        return steps, pending

    def outcome(wheel: bool) -> tuple[object, ...]:
        # uvloop with 3.13.0's eager_task_factory raises TypeError (uvloop passes eager_start,
        # which that factory does not take): loop mode must then fail exactly as uvloop does.
        try:
            return ("ok", *run_on(base, wheel, main))
        except Exception as exc:
            return ("error", type(exc).__name__, str(exc))

    on_wheel, on_base = outcome(True), outcome(False)
    assert on_wheel[:2] == on_base[:2]
    if on_wheel[0] == "error":
        assert on_wheel == on_base
        return
    _, steps, pending = on_wheel
    if base is None:  # uvloop's create_task does not start tasks eagerly, with or without us
        assert steps == ["child started", "create_task returned", "timed out"]
        assert pending == 2  # the eager task's sleep and its timeout, both on the wheel
    else:
        assert steps[-1] == "timed out"


# -- call graphs (3.14+) ------------------------------------------------------------------------


def _graph_of_a_sleeping_task() -> Coroutine[Any, Any, str]:
    async def sleeper() -> None:
        await asyncio.sleep(30)

    async def main() -> str:
        task = asyncio.create_task(sleeper(), name="sleeper")
        await asyncio.sleep(0)
        graph = asyncio.format_call_graph(task)  # type: ignore[attr-defined]
        task.cancel()
        return re.sub(r"0x[0-9a-f]+", "0x?", str(graph))

    return main()


@needs_314
@pytest.mark.bases("asyncio", "uvloop")
def test_call_graph_of_a_task_on_a_wheel_timer_is_the_base_loops(base: Base) -> None:
    on_wheel = run_on(base, True, _graph_of_a_sleeping_task)
    on_base = run_on(base, False, _graph_of_a_sleeping_task)
    assert "sleeper" in on_wheel and "sleep" in on_wheel
    assert on_wheel == on_base


PS_PROGRAM = textwrap.dedent(
    """
    import asyncio, sys
    import aiowheel

    async def sleeper():
        await asyncio.sleep(60)

    async def main():
        async with asyncio.TaskGroup() as tg:
            tg.create_task(sleeper(), name="wheel-sleeper")
            await asyncio.sleep(0)
            if sys.argv[1] == "wheel":
                assert aiowheel.get_timer().stats().pending == 1
            print("ready", flush=True)
            await asyncio.sleep(60)

    if sys.argv[1] == "wheel":
        aiowheel.run(main())
    else:
        asyncio.run(main())
    """
)


def _ps(mode: str, command: str) -> list[str]:
    """``python -m asyncio <command>`` on a program whose task sleeps (wheel: on the wheel)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", PS_PROGRAM, mode], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        shown = run_python(["-m", "asyncio", command, str(proc.pid)])
        assert shown.returncode == 0, shown.stderr
    finally:
        proc.kill()
        proc.wait()
    # Ids, thread ids and the column padding differ between runs; the rest must not.
    return [
        re.sub(r"\s+", " ", re.sub(r"0x[0-9a-f]+|\b\d{3,}\b", "?", line)).strip()
        for line in shown.stdout.splitlines()
    ]


@needs_314
@pytest.mark.parametrize("command", ["ps", "pstree"])
def test_asyncio_ps_shows_a_task_sleeping_on_the_wheel_as_on_the_base_loop(command: str) -> None:
    on_wheel = _ps("wheel", command)
    on_base = _ps("base", command)
    assert any("wheel-sleeper" in line for line in on_wheel)
    assert any("sleeper" in line and "sleep" in line for line in on_wheel) or command == "pstree"
    assert on_wheel == on_base
