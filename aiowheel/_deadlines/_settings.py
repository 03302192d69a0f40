"""A server adapter's configuration, checked once when the adapter is made, and the argument
checks every deadline adapter shares.

Why a room of its own. Every server adapter (:mod:`aiowheel.asgi`, :mod:`aiowheel.aiohttp`,
:mod:`aiowheel.grpc`) takes the same settings: a default deadline, overrides by path (or gRPC
method), the inbound header, and the answer a deadline gives (status, body, content type).
:class:`Settings` checks them together, with errors naming the adapter, and answers the
questions a request asks of them (its deadline, its cap, the body of a 504). The checks it is
made of (:func:`positive`, :func:`header_name`, :func:`nonnegative`) are the client adapters'
and the budget's too. Nothing here runs per request beyond a lookup: the requests' table is
:mod:`aiowheel._deadlines._deadline`, the budget :mod:`aiowheel._deadlines._budget`.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, final

from .._common._validate import period
from ._inbound import inbound_cap

__all__ = [
    "DEFAULT_BODY",
    "Body",
    "Expired",
    "Settings",
    "header_name",
    "nonnegative",
    "positive",
]

DEFAULT_BODY: Final = b'{"error": "gateway timeout"}'


@final
@dataclass(frozen=True, slots=True)
class Expired:
    """What the deadline's answer is made from (``body=`` may be a function of it).

    Times are loop times (``loop.time()``), the clock deadlines are kept by.
    """

    path: str
    """The request's path."""
    started: float
    """When the middleware armed the deadline."""
    deadline: float
    """The deadline it enforced (after any override, cap or :func:`set_deadline`)."""
    now: float
    """When the answer was made (never before ``deadline`` unless the endpoint gave up
    early with :class:`BudgetExhausted`)."""

    @property
    def waited(self) -> float:
        """Seconds from the request's start to the answer (``now - started``)."""
        return self.now - self.started


Body = bytes | Callable[[Expired], bytes]
"""A fixed response body, or a function making one from an :class:`Expired`."""


# The longest request deadline, in seconds (about 31 years): a longer `timeout`, override or
# set_deadline() is this long. Beyond ~1e305 s a deadline could not even be filed (its tick
# overflows); well before that, every such deadline means "none".
_LONGEST: Final = 1e9


def positive(owner: str, name: str, value: object) -> float:
    """``value`` as a positive finite float, at most :data:`_LONGEST`; else the one check's
    error, naming ``owner`` (the function called) and ``name``."""
    seconds = period(f"{owner}(): {name}", value)
    return seconds if seconds <= _LONGEST else _LONGEST


def header_name(owner: str, header: object, *, optional: bool = True) -> str:
    """``header=`` as the lower-case header name it names (an HTTP token), or a clear error
    naming ``owner`` (the function called): a name that is not latin-1 could never be looked
    up or sent. ``optional``: the error says None is accepted too (the caller handles it)."""
    alternative = " or None" if optional else ""
    if not isinstance(header, str):
        raise TypeError(
            f"{owner}(): header must be a header name (a str){alternative}, "
            f"got {type(header).__name__}"
        )
    if not _TOKEN.fullmatch(header.strip()):
        raise ValueError(
            f"{owner}(): header must be a header name (ASCII letters, digits and "
            f"!#$%&'*+-.^_`|~){alternative}, got {header!r}"
        )
    return header.strip().lower()


def _content_type(owner: str, content_type: object) -> str:
    """``content_type=`` checked as a header value (latin-1, no control characters: what a
    504 sends, and no header injection), or a clear error naming ``owner``."""
    if not isinstance(content_type, str):
        raise TypeError(f"{owner}(): content_type must be a str, got {type(content_type).__name__}")
    if not _HEADER_VALUE.fullmatch(content_type):
        raise ValueError(
            f"{owner}(): content_type must be a header value (latin-1, no control "
            f"characters), got {content_type!r}"
        )
    return content_type


def _overrides(
    owner: str, overrides: object, keys: str
) -> tuple[dict[str, float], tuple[tuple[str, float], ...]]:
    """``overrides=`` checked (a mapping of ``keys``, paths starting with '/', to seconds), as
    the exact paths' deadlines and the prefixes' (a key ending in ``*``), longest first; the
    errors name ``owner``."""
    exact: dict[str, float] = {}
    prefixes: list[tuple[str, float]] = []
    if overrides is not None:
        if not isinstance(overrides, Mapping):
            raise TypeError(
                f"{owner}(): overrides must be a mapping of {keys} to seconds, "
                f"got {type(overrides).__name__}"
            )
        for path, seconds in overrides.items():
            if not isinstance(path, str):
                raise TypeError(
                    f"{owner}(): overrides keys must be {keys} starting with '/', "
                    f"got {type(path).__name__}"
                )
            if not path.startswith("/"):
                raise ValueError(
                    f"{owner}(): overrides keys must be {keys} starting with '/', got {path!r}"
                )
            value = positive(owner, f"overrides[{path!r}]", seconds)
            if path.endswith("*"):
                prefixes.append((path[:-1], value))
            else:
                exact[path] = value
    prefixes.sort(key=lambda item: len(item[0]), reverse=True)  # the longest wins
    return exact, tuple(prefixes)


@final
class Settings:
    """A server adapter's checked configuration: the deadlines by path (or gRPC method: its
    full name, ``/package.Service/Method``, is a path too), the header, the HTTP answer."""

    __slots__ = (
        "body", "by_path", "content_type", "exact", "header", "owner", "prefixes", "status",
        "timeout",
    )  # fmt: skip

    def __init__(
        self,
        owner: str,
        timeout: object,
        overrides: object,
        header: object,
        status: object = 504,
        body: object = DEFAULT_BODY,
        content_type: object = "application/json",
        *,
        keys: str = "paths",
    ) -> None:
        self.owner = owner
        self.timeout = positive(owner, "timeout", timeout)
        self.exact, self.prefixes = _overrides(owner, overrides, keys)
        self.by_path = bool(self.exact or self.prefixes)  # else every request gets `timeout`
        self.header: str | None = None if header is None else header_name(owner, header)
        if isinstance(status, bool) or not isinstance(status, int):
            raise TypeError(
                f"{owner}(): status must be an HTTP status code (an int), "
                f"got {type(status).__name__}"
            )
        if not 100 <= status <= 599:
            raise ValueError(f"{owner}(): status must be an HTTP status code, got {status!r}")
        self.status: int = status
        if not isinstance(body, bytes) and not callable(body):
            raise TypeError(
                f"{owner}(): body must be bytes or a function of Expired returning bytes, "
                f"got {type(body).__name__}"
            )
        self.body: Body = body
        self.content_type: str = _content_type(owner, content_type)

    def cap(
        self, raw: str | Sequence[str] | None, client: object, log: logging.Logger
    ) -> float | None:
        """:func:`inbound_cap` of this server's header (its values on a request from
        ``client``; a bad one logged on ``log``, naming this adapter)."""
        assert self.header is not None
        return inbound_cap(self.owner, self.header, raw, client, log)

    def seconds_for(self, *paths: str) -> float:
        """The deadline, in seconds, of a request to the first of ``paths`` an override
        names (exact before prefix), else the default."""
        exact = self.exact
        if exact:
            for path in paths:
                found = exact.get(path)
                if found is not None:
                    return found
        for prefix, seconds in self.prefixes:
            for path in paths:
                if path.startswith(prefix):
                    return seconds
        return self.timeout

    def answer(self, expired: Expired) -> bytes:
        """The body of the deadline's answer (TypeError naming ``body`` if its function
        returns anything but bytes)."""
        body = self.body
        if isinstance(body, bytes):
            return body
        made = body(expired)
        if not isinstance(made, bytes):
            raise TypeError(
                f"{self.owner}(): body must return bytes from its Expired, "
                f"got {type(made).__name__}"
            )
        return made


_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110's token
_HEADER_VALUE: Final = re.compile(r"[\t\x20-\x7e\x80-\xff]*")  # latin-1, no controls


def nonnegative(where: str, name: str, value: object) -> float:
    """``value`` as seconds: a number, >= 0 and finite (a budget's ``minimum``, a client
    adapter's ``margin``); else TypeError / ValueError naming ``where`` (the function
    called, with its parentheses) and ``name``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{where}: {name} must be a number of seconds, got {type(value).__name__}")
    if not 0 <= value < math.inf:
        raise ValueError(f"{where}: {name} must be >= 0 and finite, got {value!r}")
    return float(value)
