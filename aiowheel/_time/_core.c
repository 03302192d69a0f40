/* aiowheel._time._core: the native core of the compiled build.
 *
 * What it is. One Core per driver (aiowheel._time._driver.Driver, behind the store seam of
 * aiowheel._time._store.NativeStore) holds every *callback* timer of that driver: the TimerHandles of
 * loop mode's loop.call_at / loop.call_later, and of Timer.call_at / call_later. It is a
 * hierarchical timing wheel written in C, the algorithm of
 * aiowheel/_time/_wheel.py (that module's docstring is the theory of operation; _native/wheel.c says
 * where the two differ, and tests/time/test_native.py feeds both the same random operations and
 * compares what they do), with the TimerHandle type, loop mode's call_at / call_later
 * themselves (FASTCALL functions installed on the loop), and the run of a batch of due handles.
 *
 * Why beside the mypyc wheel, not under it. aiowheel's own entries (timeouts, heartbeats,
 * sleepers, scheduled starts) are mypyc classes whose methods the driver calls natively; a C
 * wheel holding them would cost a crossing from mypyc into C per operation, which is what a
 * timeout saves. Callback handles are the opposite case: nearly every timer of a server
 * (asyncio.sleep, asyncio.timeout, wait_for, every library's call_at) is one, and their whole
 * life, from the loop's call_later to cancel() or the run, can stay in C. So the driver owns
 * two wheels on one tick grid: it advances both to the same tick in the same pass, merges their
 * due batches by deadline, and arms one wake-up for the earlier of their next expirations.
 * The Core calls back into the driver for two things only: "a bucket earlier than the armed
 * wake-up was queued" (the driver's _arm, which is rare), and a cancel() from a thread that is
 * not the loop's (the driver's claim).
 *
 * The parts. The source is split by concept, mirroring the Python rooms; each part's header
 * names the Python file it mirrors and where it differs on purpose:
 *
 *   _native/core.h    the shared layouts (handle, Core), constants and module state
 *   _native/wheel.c   the wheel: buckets, the heap of bucket expirations, insert / unlink /
 *                     advance / drain, the stable sort                       (_wheel.py)
 *   _native/clock.c   a Core's time: the native clock, a deadline's tick, arming, rebase
 *                                                                (_driver.py's clock side)
 *   _native/handle.c  the TimerHandle type                                  (_handles.py)
 *   _native/router.c  filing, and loop mode's call_at / call_later        (_loopcalls.py)
 *   _native/due.c     advance to now, run a due batch      (Driver._advance, run_batch)
 *   _native/scheduled.c  loop._scheduled's list type, the base's heap and its readers' view
 *                                                                       (_scheduled.py)
 *   _native/module.c  the Core's life cycle and methods, DONE, setup(), the module
 *
 * This file is the extension's one source: it includes the parts in that order, so they are
 * one translation unit, compiled as the single file they were, and the compiler inlines across
 * parts (handle_new and the arming into core_file, for one) exactly as before. Every
 * function stays static; a part uses only what the parts before it define. setup.py lists the
 * parts in depends= (an edit rebuilds), MANIFEST.in puts them in the sdist, and .ci/asan-suite
 * compiles this file alone (the includes are relative to it).
 *
 * Module state. What the core needs from the interpreter and from aiowheel's Python side (the
 * handle and Core types, setup()'s helpers, interned names) lives in the module's state
 * (multi-phase init, core.h), reached on hot paths through a pointer each Core keeps, never
 * looked up per call. What stays process-wide says why where it is declared.
 *
 * Handles are not tracked by the garbage collector while the wheel has them and, on GIL
 * builds, come from a free list; the Core is tracked, and its traverse reports every pending
 * handle's callback, args and context (its clear drains them), so a loop dropped unclosed with
 * timers pending is still collected. A handle that has run and is still held elsewhere is
 * tracked from then on (handle.c, handle_keep), so a cycle through it is collected as one
 * through asyncio's own handle is.
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
#include "_native/scheduled.c"
#include "_native/module.c"
