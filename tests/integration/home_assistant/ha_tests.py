"""A custom integration's tests as Home Assistant's developers write them: time moved with
async_fire_time_changed and the freezer, leftover timers caught by verify_cleanup.

Run by aiowheel's tests/integration/test_home_assistant.py, with plain pytest (stock asyncio)
and with ``-p aiowheel.pytest`` (loop mode): the outcomes must be the same.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from unittest.mock import AsyncMock

from custom_components.timers_demo import Demo
from homeassistant.core import HassJob, HomeAssistant
from homeassistant.helpers.update_coordinator import UpdateFailed
from homeassistant.util import dt as dt_util
from homeassistant.util.async_ import get_scheduled_timer_handles
from pytest_homeassistant_custom_component.common import async_fire_time_changed


async def started(hass: HomeAssistant, fetch: AsyncMock) -> Demo:
    demo = Demo(hass, fetch)
    await demo.start()
    return demo


async def move(hass: HomeAssistant, seconds: float) -> None:
    async_fire_time_changed(hass, dt_util.utcnow() + timedelta(seconds=seconds))
    await hass.async_block_till_done()


async def test_the_coordinator_polls_every_30_seconds(hass: HomeAssistant) -> None:
    fetch = AsyncMock(return_value=21.0)
    demo = await started(hass, fetch)
    assert fetch.await_count == 1
    await move(hass, 31)
    assert fetch.await_count == 2
    await demo.stop()


async def test_a_failed_poll_makes_the_data_unavailable(hass: HomeAssistant) -> None:
    fetch = AsyncMock(return_value=21.0)
    demo = await started(hass, fetch)
    fetch.side_effect = UpdateFailed("sensor offline")
    await move(hass, 31)
    state = "unavailable" if not demo.coordinator.last_update_success else str(fetch.return_value)
    assert state == "unavailable"
    await demo.stop()


async def test_the_save_waits_five_seconds(hass: HomeAssistant) -> None:
    demo = await started(hass, AsyncMock(return_value=1))
    demo.save_later("a")
    await move(hass, 4)
    assert demo.saved == []
    await move(hass, 6)
    assert demo.saved == ["a"]
    await demo.stop()


async def test_the_heartbeat_beats_every_minute(hass: HomeAssistant) -> None:
    demo = await started(hass, AsyncMock(return_value=1))
    await move(hass, 61)
    assert demo.beats == 1
    await demo.stop()


async def test_the_freezer_moves_the_clock(hass: HomeAssistant, freezer) -> None:  # type: ignore[no-untyped-def]
    fetch = AsyncMock(return_value=1)
    demo = await started(hass, fetch)
    freezer.tick(timedelta(seconds=31))
    async_fire_time_changed(hass)
    await hass.async_block_till_done()
    assert fetch.await_count == 2
    await demo.stop()


async def test_the_debouncer_calls_once_after_its_cooldown(hass: HomeAssistant) -> None:
    demo = await started(hass, AsyncMock(return_value=1))
    for _ in range(3):
        await demo.debouncer.async_call()
    assert demo.saved == []
    await move(hass, 6)
    assert demo.saved == ["flushed"]
    await demo.stop()


async def test_a_timer_run_early_by_the_helper_is_not_run_again(hass: HomeAssistant) -> None:
    # async_fire_time_changed runs the handle (_run()) and cancels it: once, not twice.
    demo = await started(hass, AsyncMock(return_value=1))
    demo.save_later("b")
    await move(hass, 6)
    await asyncio.sleep(0.01)
    await move(hass, 20)
    assert demo.saved == ["b"]
    await demo.stop()


async def test_every_timer_is_seen_where_the_helpers_look(hass: HomeAssistant) -> None:
    demo = await started(hass, AsyncMock(return_value=1))
    demo.save_later("c")
    live = [h for h in get_scheduled_timer_handles(hass.loop) if not h.cancelled()]
    # the poll, the heartbeat and the save, whatever else hass has filed
    assert len(live) >= 3
    await demo.stop()


def marked_for_shutdown(hass: HomeAssistant) -> set[asyncio.TimerHandle]:
    """The live timers whose job says cancel_on_shutdown (HassJob among their arguments)."""
    return {
        handle
        for handle in get_scheduled_timer_handles(hass.loop)
        if not handle.cancelled()
        and any(type(job) is HassJob and job.cancel_on_shutdown for job in handle._args or ())
    }


async def test_shutdown_cancels_the_timers_marked_for_it(hass: HomeAssistant) -> None:
    before = marked_for_shutdown(hass)
    demo = await started(hass, AsyncMock(return_value=1))
    marked = marked_for_shutdown(hass) - before
    assert marked  # the heartbeat (and, on newer Home Assistant, the poll)
    await hass.async_stop(force=True)
    assert all(handle.cancelled() for handle in marked)
    await demo.stop()


async def test_leaky(hass: HomeAssistant) -> None:
    # Leaves its save behind (and its poll and heartbeat): verify_cleanup must fail this test.
    demo = await started(hass, AsyncMock(return_value=1))
    demo.save_later("never")
