"""Request deadlines at their edges (issue 47): the deadline ends with the complete response,
set_deadline() from a worker thread, deadlines too long to file, a request's deadline named in
the census; and BackgroundTasks and a plain ``def`` endpoint under a real uvicorn."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
import warnings
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

import aiowheel
import aiowheel.asgi
import aiowheel.testing
from aiowheel.asgi import DeadlineMiddleware, budget, set_deadline
from tests.support import ROOT, collect_errors, free_port, http_scope, raw_call

pytestmark = pytest.mark.anyio

ON_VIRTUAL = pytest.mark.parametrize(
    "anyio_backend",
    [pytest.param(("asyncio", {"loop_factory": aiowheel.testing.virtual_loop_factory()}),
                  id="virtual")],
)  # fmt: skip
ON_REAL = pytest.mark.parametrize(
    "anyio_backend", [pytest.param(("asyncio", {"use_uvloop": False}), id="asyncio")]
)


START = {"type": "http.response.start", "status": 200, "headers": []}
LAST = {"type": "http.response.body", "body": b"ok", "more_body": False}


def request_deadlines() -> list[aiowheel.PendingTimer]:
    return [t for t in aiowheel.pending_timers() if t.origin.startswith("request deadline")]


# --- the deadline ends with the response -------------------------------------------------------


@ON_VIRTUAL
async def test_once_the_response_is_complete_the_deadline_no_longer_guards_the_task() -> None:
    seen: dict[str, object] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await asyncio.sleep(0.5)  # suspended: the deadline is on the wheel
        seen["before"] = aiowheel.time_left()
        seen["filed"] = len(request_deadlines())
        await send(START)
        await send(LAST)
        # After the response, as Starlette's BackgroundTasks run: no deadline, nothing filed.
        seen["after"] = (aiowheel.time_left(), budget(), len(request_deadlines()))
        await asyncio.sleep(5)  # past the 1 s deadline: never cancelled
        seen["finished"] = True

    sent = await raw_call(DeadlineMiddleware(app, timeout=1), http_scope())
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert seen == {"before": pytest.approx(0.5), "filed": 1, "after": (None, None, 0),
                    "finished": True}  # fmt: skip
    with pytest.raises(RuntimeError, match="the request has ended"):
        await _set_deadline_after_the_response()


async def _set_deadline_after_the_response() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send(START)
        await send(LAST)
        set_deadline(10)

    await raw_call(DeadlineMiddleware(app, timeout=1), http_scope())


@ON_VIRTUAL
async def test_an_incomplete_response_is_still_cut_off_and_an_error_after_one_propagates() -> None:
    async def streaming(scope: Any, receive: Any, send: Any) -> None:
        await send({**START, "trailers": True})  # complete only with its last trailers
        await send(LAST)
        await asyncio.sleep(5)
        await send({"type": "http.response.trailers", "headers": [], "more_trailers": False})

    with pytest.raises(TimeoutError):  # the deadline's: the server aborts the response
        await raw_call(DeadlineMiddleware(streaming, timeout=1), http_scope())

    async def with_trailers(scope: Any, receive: Any, send: Any) -> None:
        await send({**START, "trailers": True})
        await send(LAST)
        await send({"type": "http.response.trailers", "headers": [], "more_trailers": False})
        await asyncio.sleep(5)

    # Complete: not cut off.
    await raw_call(DeadlineMiddleware(with_trailers, timeout=1), http_scope())

    async def fails_later(scope: Any, receive: Any, send: Any) -> None:
        await send(START)
        await send(LAST)
        await asyncio.sleep(5)
        raise aiowheel.asgi.BudgetExhausted("the background work's own")

    with pytest.raises(aiowheel.asgi.BudgetExhausted, match="the background work's own"):
        # As it is, not a 504.
        await raw_call(DeadlineMiddleware(fails_later, timeout=1), http_scope())


# --- set_deadline() from a worker thread -------------------------------------------------------


@ON_REAL
async def test_set_deadline_in_a_def_endpoint_moves_the_deadline_from_its_thread() -> None:
    app = FastAPI()
    app.add_middleware(DeadlineMiddleware, timeout=0.3)
    seen: dict[str, Any] = {}
    release = threading.Event()

    @app.get("/sooner")
    def sooner() -> dict[str, bool]:  # a plain def: FastAPI runs it in a worker thread
        set_deadline(0.2)
        seen["budget"] = budget()
        release.wait(5)  # a thread cannot be cancelled: it runs on after the 504
        return {"ok": True}

    @app.get("/later")
    def later() -> dict[str, bool]:
        set_deadline(5)
        time.sleep(0.6)
        return {"ok": True}

    transport = httpx.ASGITransport(app)
    async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
        begun = time.monotonic()
        response = await http.get("/sooner")
        took = time.monotonic() - begun
        release.set()
        assert response.status_code == 504, response.text
        assert 0.19 <= took < 2.0  # at its 0.2 s deadline: not the 5 s the thread holds
        assert 0 < seen["budget"] <= 0.2
        begun = time.monotonic()
        assert (await http.get("/later")).status_code == 200  # moved past the 0.3 s default
        assert time.monotonic() - begun >= 0.55
    assert request_deadlines() == []


@ON_REAL
async def test_set_deadline_through_asyncio_to_thread_moves_the_deadline_sooner() -> None:
    requests: list[object] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        requests.append(aiowheel._deadlines._deadline.current.get())
        await asyncio.sleep(0.01)  # filed on the wheel by now
        await asyncio.to_thread(set_deadline, 0.05)  # moved: refiled on the loop's thread
        await asyncio.sleep(1)

    begun = time.monotonic()
    sent = await raw_call(DeadlineMiddleware(app, timeout=30), http_scope())
    assert sent[0]["status"] == 504 and time.monotonic() - begun < 10
    assert request_deadlines() == []


# --- deadlines too long to file ----------------------------------------------------------------


@ON_VIRTUAL
async def test_a_huge_deadline_is_clamped_and_takes_no_other_request_s_away() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["path"] == "/huge":
            set_deadline(1e308)
        await asyncio.sleep(3600 if scope["path"] == "/" else 10)
        await send(START)
        await send(LAST)

    middleware = DeadlineMiddleware(app, timeout=0.1, overrides={"/big": 1e308})
    loop = asyncio.get_running_loop()
    started = loop.time()
    # Started in the same loop iteration: their deadlines are filed by one callback.
    big, slow, huge = await asyncio.gather(
        *(raw_call(middleware, http_scope(path)) for path in ("/big", "/", "/huge"))
    )
    assert (big[0]["status"], slow[0]["status"], huge[0]["status"]) == (200, 504, 200)
    # The slow one's deadline held (without it, it would have slept its 3600 s).
    assert loop.time() - started == pytest.approx(10)

    async def moved(scope: Any, receive: Any, send: Any) -> None:
        assert set_deadline(1e308) - set_deadline(1) == pytest.approx(1e9 - 1)

    await raw_call(DeadlineMiddleware(moved, timeout=1e308), http_scope())  # clamped to 10**9 s


@pytest.mark.skipif(
    not inspect.isfunction(aiowheel._deadlines._deadline._Table.join),
    reason="compiled (mypyc calls its own methods directly: a patched one is never reached); "
    "the pure build's passes run it, on the same source",
)
@ON_VIRTUAL
async def test_a_deadline_that_cannot_be_filed_is_reported_and_kept_on_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    join = aiowheel._deadlines._deadline._Table.join

    def failing(table: Any, request: Any) -> None:
        if request.route["path"] == "/bad":
            raise OverflowError("no room on the wheel")
        join(table, request)

    monkeypatch.setattr(aiowheel._deadlines._deadline._Table, "join", failing)
    errors = collect_errors(asyncio.get_running_loop())

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await asyncio.sleep(3600)

    middleware = DeadlineMiddleware(app, timeout=1)
    answers = await asyncio.gather(
        *(raw_call(middleware, http_scope(path)) for path in ("/a", "/bad", "/b"))
    )
    assert [sent[0]["status"] for sent in answers] == [504, 504, 504]
    (error,) = errors
    assert isinstance(error["exception"], OverflowError)
    assert "kept on the loop's call_at" in error["message"]


# --- a forked child --------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_request_deadline_in_a_forked_child_guards_the_child_s_task() -> None:
    """A child forked inside a request keeps its parent's thread id and (3.11) its registry of
    current tasks, so the request table its parent's loop left is not asked for a task there
    (aiowheel._time._threads.FORKS): the child's request is its own task's, and its deadline cancels
    that task, not the parent's."""
    deadlines = aiowheel._deadlines._deadline.Deadlines()

    async def child_request() -> bytes:
        request = deadlines.start(0.05, None, "/child")
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(2)
        ended = deadlines.end(request, None)
        return b"%d%d" % (request.task is asyncio.current_task(), ended)

    async def parent_request() -> bytes:
        request = deadlines.start(60, None, "/parent")  # this loop's table, made in this thread
        read, write = os.pipe()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # "multi-threaded ... fork()"
            pid = os.fork()
        if pid == 0:  # the child: a loop of its own, its request, report, exit at once
            try:
                os.write(write, asyncio.run(child_request()))
            finally:
                os._exit(0)
        os.waitpid(pid, 0)  # noqa: ASYNC222 (the child's one request takes 50 ms)
        seen = os.read(read, 2)
        os.close(read)
        os.close(write)
        assert not deadlines.end(request, None)
        return seen

    assert asyncio.run(parent_request()) == b"11", "the child's deadline took its parent's task"


# --- the census names a request's deadline by its route ----------------------------------------


@ON_VIRTUAL
async def test_the_census_names_a_request_deadline_by_its_method_and_route() -> None:
    app = FastAPI()
    app.add_middleware(DeadlineMiddleware, timeout=5)
    gate = asyncio.Event()

    @app.get("/items/{item}")
    async def item(item: int) -> dict[str, int]:
        await gate.wait()
        return {"item": item}

    transport = httpx.ASGITransport(app)
    async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
        one = asyncio.ensure_future(http.get("/items/1"))
        for _ in range(1000):  # bounded by iterations: a wrong name fails, never hangs
            if request_deadlines():
                break
            await asyncio.sleep(0)
        assert [t.origin for t in request_deadlines()] == ["request deadline GET /items/{item}"]
        others = [asyncio.ensure_future(http.get(f"/items/{n}")) for n in (2, 3)]
        for _ in range(1000):
            if "more" in request_deadlines()[0].origin:
                break
            await asyncio.sleep(0)
        assert [t.origin for t in request_deadlines()] == [
            "request deadline GET /items/{item} +2 more"
        ]
        assert ("call request deadline GET /items/{item} +2 more", 1) in aiowheel.timer_census()
        gate.set()
        assert [r.status_code for r in await asyncio.gather(one, *others)] == [200] * 3
    assert request_deadlines() == []


# --- under a real uvicorn ------------------------------------------------------------------------

SERVED = textwrap.dedent(
    """
    import asyncio, time
    from pathlib import Path

    from fastapi import BackgroundTasks, FastAPI

    import aiowheel
    from aiowheel.asgi import DeadlineMiddleware, set_deadline

    app = FastAPI()
    app.add_middleware(DeadlineMiddleware, timeout=0.3)
    MARKS = Path(__file__).parent


    async def later(name: str) -> None:
        await asyncio.sleep(0.6)  # twice the request's deadline
        (MARKS / name).write_text(f"done, time_left={aiowheel.time_left()}")


    @app.get("/background")
    async def background(tasks: BackgroundTasks) -> dict[str, bool]:
        tasks.add_task(later, "background.txt")
        return {"ok": True}


    @app.get("/thread")
    def thread() -> dict[str, bool]:  # a worker thread: set_deadline() files the move
        set_deadline(0.2)
        time.sleep(0.6)
        return {"ok": True}
    """
)


@pytest.mark.once  # a server from its own command line
@pytest.mark.parametrize("loop", ["asyncio", "aiowheel.loops:asyncio_loop"])
def test_under_uvicorn_background_tasks_finish_and_a_def_endpoint_gets_its_504(
    tmp_path: Path, loop: str
) -> None:
    (tmp_path / "served.py").write_text(SERVED)
    port = free_port()
    command = [sys.executable, "-m", "uvicorn", "served:app", "--app-dir", str(tmp_path),
               "--host", "127.0.0.1", "--port", str(port), "--loop", loop]  # fmt: skip
    server = subprocess.Popen(
        command, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        give_up = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/background", timeout=10) as answer:
                    assert answer.status == 200
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < give_up, "no server"
                time.sleep(0.05)
        mark = tmp_path / "background.txt"
        while not mark.exists():  # the task outlives the request's 0.3 s deadline
            assert time.monotonic() < give_up, "the background task never finished"
            time.sleep(0.05)
        begun = time.monotonic()
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.urlopen(f"{url}/thread", timeout=10)
        took = time.monotonic() - begun
        assert answer.value.code == 504
        assert took < 0.55  # its 0.2 s deadline, before the thread's 0.6 s sleep ends
        time.sleep(0.6)  # the thread runs on after the 504: let it end before the server
    finally:
        server.send_signal(signal.SIGINT)
        output, _ = server.communicate(timeout=30)
    assert mark.read_text() == "done, time_left=None"
    assert "Exception in ASGI application" not in output, output
    assert "Traceback" not in output, output
    assert re.search(r'"GET /background HTTP/1.1" 200', output), output


@ON_REAL
async def test_the_census_names_an_aiohttp_request_deadline_by_its_canonical_route() -> None:
    from aiohttp import web
    from aiohttp.test_utils import TestClient, TestServer

    from aiowheel.aiohttp import deadline_middleware

    seen: list[list[str]] = []

    async def item(request: web.Request) -> web.Response:
        await asyncio.sleep(0.01)  # suspended once: the deadline is filed
        seen.append([t.origin for t in request_deadlines()])
        return web.json_response({})

    app = web.Application(middlewares=[deadline_middleware(timeout=5)])
    app.router.add_get("/items/{id}", item)
    async with TestClient(TestServer(app)) as http:
        assert (await http.get("/items/3")).status == 200
    assert seen == [["request deadline GET /items/{id}"]]
