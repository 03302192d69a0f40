"""Loop mode: the loop classes whose ``call_at`` / ``call_later`` file on the wheel, the base
loop's own heap and ``loop._scheduled`` as its readers see it, the per-loop state, the
default Timer of each loop, and the factories (``aiowheel.loops``, ``aiowheel.testing``).
Imports every folder below it (``_common``, ``_time``, ``_seeing``, ``_virtual``).
"""
