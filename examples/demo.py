"""A short tour: schedule, cancel and fire timers, sleep, and print what happened."""

from __future__ import annotations

import asyncio

import aiowheel


async def main() -> None:
    async with aiowheel.Timer() as timer:
        start = timer.time()

        def log(what: str) -> None:
            print(f"  {timer.time() - start:7.3f}s  {what}")

        timer.call_later(0.05, log, "call_later(0.05) fired")
        timer.call_later(0.01, log, "call_later(0.01) fired")
        doomed = timer.call_later(0.03, log, "this never prints")
        print(f"cancel a pending handle -> {doomed.cancel()}; again -> {doomed.cancel()}")
        print(f"pending timers: {len(timer)}")
        await timer.sleep(0.1)
        log("sleep(0.1) returned")
        result = await timer.schedule_later(0.02, asyncio.sleep, 0, "scheduled coroutine done")
        log(result)
        print(f"stats: {timer.stats()}")


if __name__ == "__main__":
    asyncio.run(main())
