"""Delayed operations (Kafka's purgatory): the book of watched operations, their two forms
(callback and awaited), ``Purgatory``, and its signals to other processes (the seam, and
Redis: the messages, the per-loop link, ``RedisSignals``). Imports ``_common``, ``_time``
and ``_loopmode`` (each loop's default Timer).
"""
