"""CPython's own test suite for asyncio.timeout, run against aiowheel's timeout.

``Lib/test/test_asyncio/test_timeouts.py`` of the running interpreter is the specification
of the semantics aiowheel promises ("identical to asyncio.timeout of the running
interpreter"). Each of its tests runs here with ``asyncio.timeout`` / ``asyncio.timeout_at``
replaced by ``aiowheel.timeout`` / ``aiowheel.timeout_at``, so a difference in behaviour,
message or repr fails.
"""

from __future__ import annotations

import asyncio
import importlib
import unittest
from typing import Any
from unittest import mock

import aiowheel

try:
    _cpython: Any = importlib.import_module("test.test_asyncio.test_timeouts")
except ImportError:  # an interpreter built without its test package
    _cpython = None


if _cpython is not None:

    class CPythonTimeoutTests(_cpython.TimeoutTests):  # type: ignore[misc]
        """asyncio's TimeoutTests, with the stdlib's timeouts swapped for aiowheel's."""

        def setUp(self) -> None:
            super().setUp()
            for name in ("timeout", "timeout_at"):
                patcher = mock.patch.object(asyncio, name, getattr(aiowheel, name))
                patcher.start()
                self.addCleanup(patcher.stop)

        async def test_the_swap_is_in_effect(self) -> None:
            async with asyncio.timeout(10) as cm:
                self.assertIsInstance(cm, aiowheel.Timeout)

else:

    class CPythonTimeoutTests(unittest.TestCase):  # type: ignore[no-redef]
        def test_stdlib_test_package_is_missing(self) -> None:
            self.skipTest("this interpreter ships without test.test_asyncio")
