"""The budget reaches every call (issue 61, 4): a call made in a task that the timeout's task
awaits, however it awaits it, carries the budget. ``DeadlineTransport`` sent no header under
``asyncio.wait_for(..., 0.5)`` on 3.11 (the call runs in a task of wait_for's), nor under
``asyncio.gather(...)`` inside ``asyncio.timeout(0.5)`` (the calls run in gather's tasks),
though both cancel the call at 0.5 s. ``asyncio.shield`` is the documented exception: the
shielded work is not cancelled with its awaiter, so it is not under its budget."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

import aiowheel
from aiowheel.asgi import budget, parse_timeout_header
from aiowheel.httpx import DeadlineTransport
from tests.support import anyio_backends

# asyncio's loop and loop mode over asyncio's and uvloop's: where the budget sees asyncio's own
# timeouts. (On uvloop without loop mode an asyncio.timeout is invisible, there as everywhere:
# aiowheel.timeout is seen; the docs say so.)
WHERE_ASYNCIO_TIMEOUTS_ARE_SEEN = [
    param for param in anyio_backends() if param.id in ("asyncio", "loop-mode", "loop-mode-uvloop")
]
pytestmark = [
    pytest.mark.anyio,
    pytest.mark.parametrize("anyio_backend", WHERE_ASYNCIO_TIMEOUTS_ARE_SEEN),
]


async def echo(scope: Any, receive: Any, send: Any) -> None:
    """A callee answering with the deadline header it got."""
    headers = dict(scope.get("headers", []))
    told = headers.get(b"x-request-timeout", b"").decode()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": told.encode()})


def client() -> httpx.AsyncClient:
    transport = DeadlineTransport(httpx.ASGITransport(app=echo))
    return httpx.AsyncClient(transport=transport, base_url="http://callee")


async def told() -> float | None:
    """The budget the callee is told by a call made here (None: no header)."""
    async with client() as http:
        text = (await http.get("/")).text
    return parse_timeout_header(text) if text else None


async def in_wait_for() -> list[float | None]:
    return [await asyncio.wait_for(told(), 0.5)]


async def in_gather() -> list[float | None]:
    async with asyncio.timeout(0.5):
        return list(await asyncio.gather(told(), told()))


async def in_a_task_group() -> list[float | None]:
    async with asyncio.timeout(0.5), asyncio.TaskGroup() as group:
        tasks = [group.create_task(told()), group.create_task(told())]
    return [task.result() for task in tasks]


async def in_an_awaited_task() -> list[float | None]:
    async with asyncio.timeout(0.5):
        return [await asyncio.create_task(told())]


async def in_gather_in_wait_for() -> list[float | None]:
    async def both() -> list[float | None]:
        return list(await asyncio.gather(told(), told()))

    return await asyncio.wait_for(both(), 0.5)


async def under_aiowheel_timeout_in_gather() -> list[float | None]:
    async with aiowheel.timeout(0.5):
        return list(await asyncio.gather(told()))


@pytest.mark.parametrize(
    "shape",
    [
        in_wait_for,
        in_gather,
        in_a_task_group,
        in_an_awaited_task,
        in_gather_in_wait_for,
        under_aiowheel_timeout_in_gather,
    ],
)
async def test_the_call_carries_the_budget(
    shape: Callable[[], Awaitable[list[float | None]]],
) -> None:
    for seconds in await shape():
        assert seconds is not None, "no header: the budget did not reach the call"
        assert 0.4 < seconds <= 0.5 - 0.005  # the margin off


async def test_budget_reads_it_in_gather_s_tasks_too() -> None:
    async def read() -> float | None:
        return budget()

    async with asyncio.timeout(0.5):
        seen = await asyncio.gather(read(), read())
    assert all(left is not None and 0.4 < left <= 0.5 for left in seen), seen


async def test_shielded_work_is_not_under_its_awaiter_s_budget() -> None:
    async with asyncio.timeout(0.5):
        seen = await asyncio.shield(told())
    assert seen is None  # not cancelled with its awaiter: the budget is not its bound
