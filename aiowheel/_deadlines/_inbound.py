"""The inbound deadline header: its parse, the cap it puts on a request's deadline, and the
warnings a bad one is worth.

Why a room of its own. A server adapter (:mod:`aiowheel.asgi`, :mod:`aiowheel.aiohttp`,
:mod:`aiowheel.grpc`) may let the caller shorten its deadline through a header
(``x-request-timeout: 2.5``, gRPC's ``grpc-timeout: 2500m``, Envoy's
``x-envoy-expected-rq-timeout-ms: 1500``). What such a header may say is strict
(:func:`parse_timeout_header`, :func:`milliseconds`), and what a bad one costs is bounded: it is
sent by the client, so its warnings (:func:`inbound_cap`) cannot become a flood, one per client
per minute and :data:`WARNINGS_PER_MINUTE` in all. None of this touches a request's table or
the budget: it reads text and logs; :class:`aiowheel._deadlines._settings.Settings` asks it for the
cap. The client adapters read :func:`parse_timeout_header` and :func:`milliseconds` too, to compare
a header the caller set with their own. It imports nothing of aiowheel's.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Sequence
from typing import Final, final

__all__ = ["WARNINGS_PER_MINUTE", "inbound_cap", "milliseconds", "parse_timeout_header"]

_SECONDS: Final = re.compile(r"[0-9]{1,9}(?:\.[0-9]{1,9})?")
_GRPC: Final = re.compile(r"([0-9]{1,8})([HMSmun])")
_GRPC_UNITS: Final = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}


def parse_timeout_header(value: str) -> float | None:
    """Seconds from an inbound deadline header's value, or None if it is not exactly a
    positive number of seconds (``2.5``) or gRPC's form (``2500m``: at most 8 digits, then
    one of ``H M S m u n``). Nothing lenient: no sign, exponent, spaces inside or ``inf``."""
    if not isinstance(value, str):
        raise TypeError(f"parse_timeout_header(): value must be a str, got {type(value).__name__}")
    value = value.strip()
    if _SECONDS.fullmatch(value):
        seconds = float(value)
    else:
        match = _GRPC.fullmatch(value)
        if match is None:
            return None
        seconds = int(match[1]) * _GRPC_UNITS[match[2]]
    return seconds if seconds > 0 else None


def inbound_cap(
    owner: str, name: str, raw: str | Sequence[str] | None, client: object, log: logging.Logger
) -> float | None:
    """The inbound header's cap in seconds, or None: absent, or bad (not exactly one value
    :func:`parse_timeout_header` accepts; a header sent twice is bad too, whatever its values).
    A header whose name ends in ``-ms`` is whole milliseconds instead (Envoy's
    ``x-envoy-expected-rq-timeout-ms: 1500``).

    A bad header is logged on ``log`` as a warning naming ``owner`` and the header, at most
    once per ``client`` (its address, or any hashable naming it) per minute and
    :data:`WARNINGS_PER_MINUTE` times a minute in all: the client sent it, so it must not be
    able to fill the server's log. The warnings left out are counted in the next one."""
    if raw is None:
        return None
    parse = milliseconds if name.endswith("-ms") else parse_timeout_header
    if isinstance(raw, str):
        value = raw
        seconds = parse(raw)
    else:
        if not raw:
            return None
        value = ", ".join(raw)
        seconds = parse(raw[0]) if len(raw) == 1 else None
    if seconds is None:
        _bad_headers.warn(owner, name, value, client, log)
    return seconds


_MILLIS: Final = re.compile(r"[0-9]{1,12}")


def milliseconds(value: str) -> float | None:
    """Seconds from a header in whole milliseconds (a name ending in ``-ms``: Envoy's
    ``x-envoy-expected-rq-timeout-ms``), or None if it is not a positive integer of at most
    12 digits."""
    value = value.strip()
    if not _MILLIS.fullmatch(value):
        return None
    millis = int(value)
    return millis / 1000 if millis > 0 else None


WARNINGS_PER_MINUTE: Final = 10
"""How many bad inbound headers are logged in a minute, over all clients."""


@final
class _Warnings:
    """The rate limit of :func:`inbound_cap`'s warnings (the module's one instance)."""

    __slots__ = ("clients", "logged", "minute", "suppressed")

    def __init__(self) -> None:
        self.clients: dict[object, float] = {}  # client -> when it was last logged
        self.minute = -math.inf  # when the current minute of WARNINGS_PER_MINUTE began
        self.logged = 0  # in the current minute
        self.suppressed = 0  # left out since the last warning

    def warn(self, owner: str, name: str, value: str, client: object, log: logging.Logger) -> None:
        now = time.monotonic()
        try:
            last = self.clients.get(client)
        except TypeError:  # unhashable: named by its text
            client = repr(client)
            last = self.clients.get(client)
        if last is not None and now - last < 60.0:
            self.suppressed += 1
            return
        if now - self.minute >= 60.0:
            self.minute = now
            self.logged = 0
            if len(self.clients) > 4096:  # forget clients not logged within the minute
                self.clients = {c: t for c, t in self.clients.items() if now - t < 60.0}
        if self.logged >= WARNINGS_PER_MINUTE:
            self.suppressed += 1
            return
        self.logged += 1
        self.clients[client] = now
        suppressed, self.suppressed = self.suppressed, 0
        log.warning(
            "%s: ignored the %s header %r from %s (not exactly one positive number of seconds, "
            "nor gRPC's form such as 100m); the server's own deadline applies%s",
            owner, name, value[:64], client,
            f" ({suppressed} more bad headers not logged)" if suppressed else "",
        )  # fmt: skip


_bad_headers: Final = _Warnings()
