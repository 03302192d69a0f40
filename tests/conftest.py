"""Every async test runs on the default asyncio loop and on uvloop (anyio's pytest plugin), and
on the loop-mode twin of each (``aiowheel.loop_factory``), where every loop timer is on a wheel."""

from __future__ import annotations

import gc
from typing import Any

import pytest
import uvloop

import aiowheel


@pytest.fixture(
    params=[
        pytest.param(("asyncio", {"use_uvloop": False}), id="asyncio"),
        pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"),
        pytest.param(("asyncio", {"loop_factory": aiowheel.loop_factory()}), id="loop-mode"),
        pytest.param(
            ("asyncio", {"loop_factory": aiowheel.loop_factory(uvloop.Loop)}),
            id="loop-mode-uvloop",
        ),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """Run each ``@pytest.mark.anyio`` test once per event loop implementation."""
    return request.param  # type: ignore[no-any-return]


def pytest_collection_finish(session: pytest.Session) -> None:
    """Move what importing and collecting made (~80k objects: aiohttp, FastAPI, hypothesis)
    out of the collector's reach. Full collections of the suite's process took up to 0.18 s,
    a stall that timing tests met at random (8 over 0.1 s in one run on 3.11; 1 with this).
    Objects the tests make are collected as before."""
    gc.collect()
    gc.freeze()
