"""Request deadlines: the inbound header, the adapters' settings, the requests' table and the
budget passed on, and the adapters (ASGI, aiohttp, gRPC, httpx). Imports ``_common``,
``_time``, ``_seeing`` and ``_loopmode`` (each loop's default Timer).
"""
