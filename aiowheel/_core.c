/* aiowheel._core: the native core of the compiled build.
 *
 * What it is. One Core per engine (aiowheel._engine.Engine) holds every *callback* timer of
 * that engine: the TimerHandles of loop mode's loop.call_at / loop.call_later, and of
 * Timer.call_at / call_later. It is a hierarchical timing wheel written in C, the same
 * algorithm as aiowheel/_wheel.py (that module's docstring is the theory of operation; this
 * file follows it line by line, and tests/test_native.py feeds both the same random
 * operations and compares what they do), with the TimerHandle type, loop mode's call_at /
 * call_later themselves (FASTCALL functions installed on the loop), and the run of a batch of
 * due handles.
 *
 * Why beside the mypyc wheel, not under it. aiowheel's own entries (timeouts, heartbeats,
 * sleepers, scheduled starts) are mypyc classes whose methods the engine calls natively; a C
 * wheel holding them would cost a crossing per operation (15-25 ns from mypyc), which is what
 * a timeout saves. Callback handles are the opposite case: nearly every timer of a server
 * (asyncio.sleep, asyncio.timeout, wait_for, every library's call_at) is one, and their whole
 * life, from the loop's call_later to cancel() or the run, can stay in C. So the engine owns
 * two wheels on one tick grid: it advances both to the same tick in the same pass, merges their
 * due batches by deadline, and arms one wake-up for the earlier of their next expirations.
 * The Core calls back into the engine for one thing only: "a bucket earlier than the armed
 * wake-up was queued" (the engine's _arm, which is rare).
 *
 * Handles are not tracked by the garbage collector and come from a free list; the Core is
 * tracked, and its traverse reports every pending handle's callback, args and context (its
 * clear drains them), so a loop dropped unclosed with timers pending is still collected.
 *
 * The clock. Where the engine's clock is time.monotonic (asyncio's loops) the Core reads
 * CLOCK_MONOTONIC itself and converts it exactly as CPython's time.monotonic does (the same
 * float, bit for bit); otherwise it calls the clock it was given (loop.time of another base, a
 * replaced loop.time, a virtual clock). It never caches "now" for a deadline.
 *
 * Free-threading (3.13t+, Py_GIL_DISABLED). The state a Core owns is only touched from its
 * methods, its handles' cancel() and their run, so one per-Core critical section
 * (Py_BEGIN_CRITICAL_SECTION, free on GIL builds, where the macros are an empty block) around
 * each of those is the whole locking: a loop used from its own thread takes an uncontended
 * lock, and a handle cancelled from a foreign thread (misuse asyncio does not support, but
 * which must not corrupt anything) serializes with the loop's thread. Two more things change
 * there: a handle holds a strong reference to its Core for its whole life (as asyncio's
 * TimerHandle holds its loop), so cancel() can always lock it, and the Core's traverse reports
 * the references of its pending handles back to itself (they are its own: without that, an
 * unclosed loop with timers pending would be a cycle through untracked objects); and there is
 * no free list (one process-wide list is a data race; mimalloc's per-thread heaps make
 * allocation cheap there anyway). The module declares Py_MOD_GIL_NOT_USED.
 */


#include "_native/core.h"
#include "_native/wheel.c"
#include "_native/clock.c"
#include "_native/handle.c"
#include "_native/router.c"
#include "_native/due.c"
#include "_native/module.c"
