"""A custom integration in Home Assistant's style, whose timers aiowheel's tests exercise
(issue 49): a coordinator polling every 30 s, a 5 s debounce, a 60 s heartbeat."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers.debounce import Debouncer
from homeassistant.helpers.event import async_call_later, async_track_time_interval
from homeassistant.helpers.update_coordinator import DataUpdateCoordinator

DOMAIN = "timers_demo"
_LOGGER = logging.getLogger(__name__)


class Demo:
    """The integration's runtime: its coordinator, debounce and heartbeat."""

    def __init__(self, hass: HomeAssistant, fetch: Callable[[], Awaitable[Any]]) -> None:
        self.hass = hass
        self.coordinator: DataUpdateCoordinator[Any] = DataUpdateCoordinator(
            hass,
            _LOGGER,
            config_entry=None,
            name=DOMAIN,
            update_method=fetch,
            update_interval=timedelta(seconds=30),
        )
        self.saved: list[str] = []
        self.beats = 0
        self.pending_save: str | None = None
        self._unsubs: list[Callable[[], None]] = []
        self.debouncer: Debouncer[Any] = Debouncer(
            hass, _LOGGER, cooldown=5, immediate=False, function=self._flush
        )

    async def start(self) -> None:
        """First refresh, then poll while someone listens; the heartbeat."""
        await self.coordinator.async_refresh()
        self._unsubs.append(self.coordinator.async_add_listener(lambda: None))
        self._unsubs.append(
            async_track_time_interval(
                self.hass, self._beat, timedelta(seconds=60), cancel_on_shutdown=True
            )
        )

    def save_later(self, value: str) -> None:
        """Save ``value`` 5 s from now (a newer value in between replaces it)."""
        self.pending_save = value
        self._unsubs.append(async_call_later(self.hass, 5, self._save))

    @callback
    def _save(self, _now: datetime) -> None:
        if self.pending_save is not None:
            self.saved.append(self.pending_save)
            self.pending_save = None

    @callback
    def _beat(self, _now: datetime) -> None:
        self.beats += 1

    async def _flush(self) -> None:
        self.saved.append("flushed")

    async def stop(self) -> None:
        """Cancel every timer the integration filed."""
        for unsub in self._unsubs:
            unsub()
        self._unsubs.clear()
        self.debouncer.async_cancel()
        await self.coordinator.async_shutdown()
