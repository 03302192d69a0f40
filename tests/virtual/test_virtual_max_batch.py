"""``max_batch`` on a virtual clock: :func:`aiowheel.testing.run`, ``virtual_loop_factory``,
``check_determinism`` and the pytest plugin's ``--aiowheel-max-batch`` reach the loop's wheel,
and a mass of due timers runs in chunks of ``max_batch`` over loop iterations, the clock
standing at their deadline meanwhile (docs/loop-mode.md, "How many due callbacks run per
iteration"). Before, only ``LoopFactory(dataclasses.replace(config, max_batch=...))`` did.
"""

from __future__ import annotations

import asyncio
import inspect
import pickle
import textwrap
from pathlib import Path
from typing import Any

import pytest

import aiowheel
import aiowheel.testing as testing
from tests.plugin.test_pytest_plugin import clock_shape, run_shape, seen
from tests.support import Base

DUE = 10  # timers due at once
DEADLINE = 1.0


async def chunks() -> tuple[list[int], list[float], int | None]:
    """File DUE timers for one deadline and run them: how many ran in each loop iteration
    (counted by a callback that re-queues itself once per iteration), in filing order, the
    loop times they ran at, and the running wheel's max_batch."""
    loop = asyncio.get_running_loop()
    iteration = 0
    ran: list[tuple[int, int, float]] = []
    done = loop.create_future()

    def count_iterations() -> None:
        nonlocal iteration
        iteration += 1
        if len(ran) < DUE:
            loop.call_soon(count_iterations)

    def due(index: int) -> None:
        if not ran:  # not before: a loop with a callback ready is not idle, the clock would stay
            loop.call_soon(count_iterations)
        ran.append((index, iteration, loop.time()))
        if len(ran) == DUE:
            done.set_result(None)

    for index in range(DUE):
        loop.call_later(DEADLINE, due, index)
    await done
    assert [index for index, _, _ in ran] == list(range(DUE))  # deadline, then filing order
    iterations = sorted({it for _, it, _ in ran})
    sizes = [sum(1 for _, it, _ in ran if it == value) for value in iterations]
    timer = aiowheel.timer_of(loop)
    return sizes, sorted({when for _, _, when in ran}), None if timer is None else timer.max_batch


@pytest.mark.parametrize(
    ("max_batch", "sizes"),
    [(None, [10]), (3, [3, 3, 3, 1]), (4, [4, 4, 2]), (1, [1] * 10), (10, [10]), (64, [10])],
)
def test_run_takes_max_batch_and_runs_a_mass_expiry_in_chunks(
    base: Base, max_batch: int | None, sizes: list[int]
) -> None:
    got, times, setting = testing.run(chunks(), base=base, max_batch=max_batch)
    assert setting == max_batch
    assert got == sizes
    assert times == [DEADLINE]  # the clock does not move while a chunk waits


def test_the_factory_takes_max_batch_and_keeps_it(base: Base) -> None:
    factory = testing.virtual_loop_factory(base, max_batch=3)
    assert factory.max_batch == 3 and factory.config.max_batch == 3
    assert factory.config.clock is not None
    assert "max_batch=3" in repr(factory)
    copy = pickle.loads(pickle.dumps(factory))
    assert copy == factory
    assert copy != testing.virtual_loop_factory(base)
    with asyncio.Runner(loop_factory=copy) as runner:
        assert runner.run(chunks()) == ([3, 3, 3, 1], [DEADLINE], 3)


def test_a_seed_and_max_batch_together() -> None:
    factory = testing.virtual_loop_factory(seed=7, max_batch=4)
    assert isinstance(factory, testing.FuzzedLoopFactory)
    assert factory.max_batch == 4 and "max_batch=4" in repr(factory)
    assert pickle.loads(pickle.dumps(factory)) == factory
    with asyncio.Runner(loop_factory=factory) as runner:
        sizes, times, setting = runner.run(chunks())
    assert setting == 4 and sizes == [4, 4, 2]
    assert len(times) == 1 and times[0] >= DEADLINE  # late as the seed says, never early
    sizes, _, setting = testing.run(chunks(), seed=7, max_batch=4)
    assert (sizes, setting) == ([4, 4, 2], 4)


def test_check_determinism_takes_max_batch() -> None:
    trace = testing.check_determinism(chunks, seed=3, max_batch=3)
    assert trace  # the two runs matched, chunked


_BAD = [(0, ValueError), (-1, ValueError), (1.5, TypeError), (True, TypeError), ("3", TypeError)]


@pytest.mark.parametrize(("value", "error"), _BAD)
def test_bad_max_batch_is_refused_as_loop_factory_refuses_it(
    value: object, error: type[Exception]
) -> None:
    with pytest.raises(error) as plain:
        aiowheel.loop_factory(max_batch=value)  # type: ignore[arg-type]
    reason = str(plain.value).removeprefix("loop_factory(): ")
    assert reason.startswith("max_batch must be a positive int or None, got ")
    with pytest.raises(error) as virtual:
        testing.virtual_loop_factory(max_batch=value)  # type: ignore[arg-type]
    assert str(virtual.value) == f"virtual_loop_factory(): {reason}"
    with pytest.raises(error) as checked:
        testing.check_determinism(chunks, max_batch=value)  # type: ignore[arg-type]
    assert str(checked.value) == f"check_determinism(): {reason}"
    main = chunks()
    with pytest.raises(error) as ran:
        testing.run(main, max_batch=value)  # type: ignore[arg-type]
    assert str(ran.value) == f"testing.run(): {reason}"
    assert inspect.getcoroutinestate(main) == "CORO_CLOSED"  # refused: no "never awaited"


# -- the pytest plugin ------------------------------------------------------------------------

PLUGIN_TESTS = textwrap.dedent(
    """
    import asyncio

    import aiowheel
    import pytest

    from record import record
    from tests.virtual.test_virtual_max_batch import chunks


    @pytest.mark.aiowheel_clock("virtual")
    @pytest.mark.asyncio
    async def test_virtual():
        sizes, times, setting = await chunks()
        record(sizes=sizes, times=times, max_batch=setting)


    @pytest.mark.asyncio
    async def test_real():
        record(max_batch=aiowheel.timer_of().max_batch)


    @pytest.mark.anyio
    async def test_anyio():
        record(max_batch=aiowheel.timer_of().max_batch)
    """
)


def _plugin_run(tmp_path: Path, ini: str, *args: str) -> tuple[Any, dict[str, dict[str, Any]]]:
    shape = clock_shape(PLUGIN_TESTS)
    shape.ini += ini
    proc, records = run_shape(tmp_path, shape, "-p", "aiowheel.pytest", *args)
    return proc, seen(records)


def test_the_plugin_option_reaches_every_loop_it_makes(tmp_path: Path) -> None:
    proc, tests = _plugin_run(tmp_path, "", "--aiowheel-max-batch", "3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 passed" in proc.stdout
    assert "base asyncio, max_batch 3" in proc.stdout
    assert tests["test_virtual"] == {
        "uvloop": False, "sizes": "[3, 3, 3, 1]", "times": "[1.0]", "max_batch": "3"
    }  # fmt: skip
    assert tests["test_real"]["max_batch"] == "3"
    assert tests["test_anyio"]["max_batch"] == "3"


def test_the_ini_option_and_the_command_line_over_it(tmp_path: Path) -> None:
    proc, tests = _plugin_run(tmp_path / "ini", "\naiowheel_max_batch = 4")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert tests["test_virtual"]["sizes"] == "[4, 4, 2]"
    assert tests["test_real"]["max_batch"] == "4"
    proc, tests = _plugin_run(tmp_path / "both", "\naiowheel_max_batch = 4",
                              "--aiowheel-max-batch", "none")  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert tests["test_virtual"]["sizes"] == "[10]"
    assert tests["test_real"]["max_batch"] == "None"
    assert "max_batch" not in proc.stdout.partition("\n\n")[0]  # no bound: the header is as before


@pytest.mark.parametrize(
    ("args", "ini", "message"),
    [
        (
            ("--aiowheel-max-batch", "0"),
            "",
            "--aiowheel-max-batch: max_batch must be a positive int or None, got 0",
        ),
        (
            ("--aiowheel-max-batch", "many"),
            "",
            "--aiowheel-max-batch: max_batch must be a positive int or None, got 'many'",
        ),
        (
            (),
            "\naiowheel_max_batch = -2",
            "aiowheel_max_batch: max_batch must be a positive int or None, got -2",
        ),
    ],
)
def test_a_bad_max_batch_option_is_a_usage_error(
    tmp_path: Path, args: tuple[str, ...], ini: str, message: str
) -> None:
    proc, _ = _plugin_run(tmp_path, ini, *args)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert f"aiowheel.pytest: {message}" in proc.stderr
