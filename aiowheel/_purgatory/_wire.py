"""The wire format of :class:`aiowheel.redis.RedisSignals`: what a signal is as a stream entry
(or pub/sub message), and how a received one is read back (or refused).

A message is JSON ``["aiowheel", 2, sender, seq, items]``: a format tag and version, the
sender's id, the message's number in that sender's order (0, 1, 2, ...: with the sender, the
message's id, which makes a message published twice, after a publish whose answer was lost,
applied once), and the items, each ``[key]`` or ``[key, data]``. The sender is
``"<process id>.<loop number>"``: each loop publishes in its own order. A ``str`` or ``int``
key (a subclass as its plain value) and ``str`` data go as they are; ``bytes`` as
``{"b": base64}``. Other keys raise TypeError naming them: a tuple's or an object's identity
does not survive a trip to another process. Reading is all or nothing: a payload that is not
this format or version, or any item of it that is not ours, makes the whole message foreign
(None), never an exception. At most 512 keys go in one message (:func:`encode_messages`).

A room of its own so that the format can be read, and changed, in one place apart from the
connection logic (connect, publish, subscribe, backoff) of :mod:`aiowheel.redis`, which
imports it: it needs neither redis-py nor a loop, and imports nothing of aiowheel's. Pure
Python in both builds, like :mod:`aiowheel.redis`.
"""

from __future__ import annotations

import base64
import json
from typing import Any, Final

__all__: list[str] = []

_TAG: Final = "aiowheel"
_VERSION: Final = 2  # 1: pub/sub only, without seq (never read now)
_BATCH: Final = 512  # keys per message at most


def _encode(sender: str, seq: int, items: list[list[Any]]) -> bytes:
    """Message ``seq`` of ``sender``'s ``items`` (each from :func:`wire_item`), as published."""
    return json.dumps([_TAG, _VERSION, sender, seq, items], separators=(",", ":")).encode()


def encode_messages(sender: str, seq: int, items: list[list[Any]]) -> list[tuple[bytes, int]]:
    """``items`` as messages of up to _BATCH items each, numbered from ``seq``: (message, its
    count of keys)."""
    chunks = [items[start : start + _BATCH] for start in range(0, len(items), _BATCH)]
    return [(_encode(sender, seq + n, chunk), len(chunk)) for n, chunk in enumerate(chunks)]


def wire_item(key: object, data: object) -> list[Any]:
    """``[key]`` or ``[key, data]`` as they go on the wire, or TypeError naming the key."""
    if isinstance(key, str):
        wire: object = key if type(key) is str else str.__str__(key)
    elif isinstance(key, int):
        wire = key if type(key) is int else int.__int__(key)
    elif isinstance(key, bytes):
        wire = {"b": base64.b64encode(key).decode("ascii")}
    else:
        raise TypeError(
            f"Purgatory.signal(): key {key!r} ({type(key).__name__}) cannot be sent to other "
            "processes: with RedisSignals, signal str, bytes or int keys"
        )
    if data is None:
        return [wire]
    if isinstance(data, bytes):
        return [wire, {"b": base64.b64encode(data).decode("ascii")}]
    return [wire, str.__str__(data)]


def _value(wire: object) -> str | bytes | int:
    """A key or data off the wire (ValueError if it is not one of ours)."""
    if isinstance(wire, str):
        return wire
    if isinstance(wire, int) and not isinstance(wire, bool):
        return wire
    if isinstance(wire, dict) and len(wire) == 1 and isinstance(wire.get("b"), str):
        return base64.b64decode(wire["b"], validate=True)
    raise ValueError("not a key")


def decode_message(payload: object) -> tuple[str, int, list[tuple[Any, Any]]] | None:
    """(sender, seq, [(key, data or None)]) of one of our messages, or None for anything
    else."""
    try:
        if not isinstance(payload, bytes | str):
            return None
        message = json.loads(payload)
        if not (
            isinstance(message, list)
            and len(message) == 5
            and message[0] == _TAG
            and message[1] == _VERSION
            and type(message[1]) is int
            and isinstance(message[2], str)
            and type(message[3]) is int
            and message[3] >= 0
            and isinstance(message[4], list)
        ):
            return None
        items: list[tuple[Any, Any]] = []
        for item in message[4]:
            if not isinstance(item, list) or len(item) not in (1, 2):
                return None
            key = _value(item[0])
            data = _value(item[1]) if len(item) == 2 else None
            if isinstance(data, int):
                return None
            items.append((key, data))
        return message[2], message[3], items
    except (ValueError, TypeError, RecursionError):  # JSON, base64 and UTF-8 errors included
        return None
