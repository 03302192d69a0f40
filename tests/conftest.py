"""Every async test runs on the default asyncio loop and on uvloop (anyio's pytest plugin), and
on the loop-mode twin of each (``aiowheel.loop_factory``), where every loop timer is on a wheel."""

from __future__ import annotations

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
