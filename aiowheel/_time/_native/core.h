/* aiowheel/_time/_native/core.h: what the parts of the native core share.
 *
 * Included once, first, by aiowheel/_time/_core.c (the parts are one translation unit, see there):
 * the constants of the tick grid, the two object layouts (a handle, a Core), the module state
 * and the few globals that cannot be module state. Every function is static; a part calls
 * only functions of parts included before it, so no prototypes are needed beyond the module
 * definition's (module.c, last, defines it; core_new in module.c and the handle type's methods
 * look their state up through it).
 */

#ifndef AIOWHEEL_NATIVE_CORE_H
#define AIOWHEEL_NATIVE_CORE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define NEVER_TICK ((int64_t)1 << 62)     /* ticks at or beyond: never due */
#define PAST_TICK (-((int64_t)1 << 62))   /* ticks below are clamped here */
#define UNQUEUED (((int64_t)1 << 62) - 1) /* aiowheel._time._wheel.UNQUEUED */
#define QUEUED_NONE INT64_MAX             /* a bucket queued under no expiration */
#define TICK_EPSILON 1e-6                 /* aiowheel._time._grid.EPSILON */
#define TICK_ULPS 0x1p-50                 /* aiowheel._time._grid.ULPS */
#define TICK_SHRINK (1.0 - TICK_ULPS)     /* aiowheel._time._grid.SHRINK */

/* A handle's fate once it is out of the wheel, kept in its tick (aiowheel._time._handles). */
#define DISPATCHED (-1)
#define RAN (-2)
#define CANCELLED (-3)
/* Out-of-wheel ticks are only these three; a pending handle's tick is its deadline tick. */

/* Before 3.13 there are no critical sections, and no free-threaded build to need them. */
#ifndef Py_BEGIN_CRITICAL_SECTION
#define Py_BEGIN_CRITICAL_SECTION(op) {
#define Py_END_CRITICAL_SECTION() }
#endif

/* The ASan build (.ci/asan-suite) frees every handle for real; on free-threaded builds one
 * process-wide list would be a data race (see _core.c). */
#if defined(AIOWHEEL_NO_FREELIST) || defined(Py_GIL_DISABLED)
#define FREELIST_MAX 0
#else
#define FREELIST_MAX 256
#endif

typedef struct link {
    struct link *prev; /* NULL: not in a wheel */
    struct link *next;
} link_t;

typedef struct CoreObject CoreObject;
typedef struct CoreState CoreState; /* below */

/* A handle is an asyncio.TimerHandle (isinstance, issue 37), so it is laid out in that class's
 * own __slots__ and no more: Handle's _args, _callback, _cancelled, _context, _loop, _repr,
 * _source_traceback (in CPython's order, sorted; before 3.12 then __weakref__, later kept
 * before the object), TimerHandle's _scheduled, _when. The callback, its arguments and its
 * context live in asyncio's own three slots; the wheel's fields (tick, link, when, core) are
 * stored over the six asyncio slots a handle has no use for, and the getsets of handle.c answer
 * for every one of those names (none of asyncio's member descriptors is reachable through the
 * type), so nothing reads them as objects. That keeps what a wheel walk and a run touch within
 * the object's first 80 bytes (two cache lines at most; with the wheel's fields after asyncio's
 * slots a due timer's walk and run touch two or three, and a large due batch runs markedly
 * slower) and the handle at asyncio's size. Module init (module.c) checks every offset and the
 * size against the running asyncio. */
typedef struct {
    PyObject_HEAD
    PyObject *args;     /* _args: a tuple; NULL once cancelled */
    PyObject *callback; /* _callback: NULL once cancelled */
    int64_t tick;       /* over _cancelled */
    PyObject *context;  /* _context: NULL if scheduled from an empty context (fresh per run) */
    link_t link;        /* over _loop and _repr */
    double when;        /* over _source_traceback */
#if PY_VERSION_HEX < 0x030C0000
    PyObject *weakreflist; /* __weakref__: asyncio's, left to CPython */
#endif
    CoreObject *core; /* over _scheduled; borrowed: valid while pending (a Core drains its
                       * handles before it goes) */
    uintptr_t seq;    /* over _when: the filing's stamp (the core's count of filings when it
                       * was filed), the tie order of handles of one deadline */
} HandleObject;

#define HANDLE_OF(l) ((HandleObject *)((char *)(l) - offsetof(HandleObject, link)))

/* A due batch runs in deadline order, which is not the order its handles lie in memory: each
 * one's first touch would wait for memory. The passes over a batch ask for the handle a few
 * places ahead (its GC header through its weak reference list: what a run and a dealloc read).
 * A hint only: nothing is read. */
#define PREFETCH_AHEAD 6
static inline void
prefetch_handle(const void *h)
{
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch((const char *)h - 16, 1);
    __builtin_prefetch((const char *)h + 63, 1);
#if PY_VERSION_HEX >= 0x030C0000
    /* From 3.12 the weak reference list is in a pre-header before the GC header (asyncio's
     * Handle has __weakref__), which the dealloc reads: on the cache line before. */
    __builtin_prefetch((const char *)h - 32, 1);
#endif
#else
    (void)h;
#endif
}

typedef struct {
    int64_t expiration;
    Py_ssize_t index;
} heapitem;

/* A handle with its place in a due batch: its deadline and filing stamp (wheel.c sorts these
 * triples, not the handles, whose fields lie scattered in memory). */
typedef struct {
    double when;
    uintptr_t seq;
    HandleObject *h;
} keyed;

/* A growable array of them. */
typedef struct {
    keyed *items;
    Py_ssize_t len;
    Py_ssize_t cap;
} karray;

/* The most entries of a due pass's arrays the module state keeps for the next pass (on GIL
 * builds; 3 MB each): a larger batch's are freed after it. */
#define SCRATCH_MAX ((Py_ssize_t)1 << 17)

struct CoreObject {
    PyObject_HEAD
    /* the wheel */
    int bits;
    int levels;
    int64_t mask;
    Py_ssize_t nbuckets;
    link_t *buckets;
    int64_t *queued;
    heapitem *heap;      /* one item per queued bucket, with room for all (wheel.c) */
    Py_ssize_t heap_len;
    Py_ssize_t heap_cap; /* nbuckets, once allocated */
    link_t never;
    int64_t elapsed;
    Py_ssize_t count;
    int64_t removed;
    int64_t cache_low;
    int64_t cache_high;
    int64_t cache_expiration;
    Py_ssize_t cache_index;
    unsigned char level_of[130];
    /* time */
    double epoch;
    double inv_tick;
    double slack; /* aiowheel._time._grid.Grid.slack: TICK_EPSILON + TICK_ULPS * |epoch| * inv_tick */
    PyObject *clock; /* NULL: CLOCK_MONOTONIC read natively */
    uintptr_t seq;   /* filings stamped so far: the core's handles and the driver's entries */
    int64_t armed;   /* the driver's armed expiration (its _armed, mirrored) */
    double exact_at; /* on an exact clock, the armed wake-up's time (its exact_at); else -inf */
    PyObject *arm;   /* the driver's _arm */
    PyObject *claim; /* the driver's take-over check for a cancel from another thread, or NULL */
    /* loop mode's routing */
    int fast;  /* the driver lets call_at / call_later file here directly */
    int debug; /* the loop's debug mode: cancel() checks the thread */
    unsigned long thread_id;
    double threshold;
    double near_pad;
    PyObject *near_call_at;
    PyObject *near_call_later;
    PyObject *slow_call_at;
    PyObject *slow_call_later;
    PyObject *note_guard; /* Guards.note_timeout of the driver: an asyncio.timeout filed here */
    /* the module (beside the routing fields a call_later reads anyway) */
    CoreState *state; /* its module's: fixed at creation */
    PyObject *module; /* a strong reference: keeps `state` alive */
    /* Two of the state's fields, copied (borrowed: the module holds them) for core_file,
     * which reads them for every handle: one load each instead of two. */
    PyTypeObject *handle_type;
    PyObject *empty_tuple;
};

/* The module state (multi-phase init): what the core needs from the interpreter and from
 * aiowheel's Python side, one set per module object. Nothing on a hot path looks it up: each
 * Core keeps a pointer to it (and a strong reference to the module, so the pointer stays valid
 * for the Core's life; core_file's two fields are copied into the Core itself), set when the
 * Core is made, and the handle type's methods that need it outside a Core's call (repr,
 * get_context, _run) read it from their type (PyType_GetModuleState: a handle's type is the
 * module's own heap type). */
struct CoreState {
    PyTypeObject *handle_type; /* aiowheel.TimerHandle: a subclass of asyncio.TimerHandle */
    PyTypeObject *core_type;   /* aiowheel._time._core.Core */
    /* Set by setup() (aiowheel._time._store, at import): aiowheel._time._handles' helpers. */
    PyObject *callback_repr;
    PyObject *empty_context; /* aiowheel._time._handles.EMPTY_CONTEXT */
    PyObject *get_running_loop;
    /* What loop mode's call_at / call_later hand to the slow path, where the driver's index of
     * the timeouts guarding each task notes them (aiowheel._time._observe.Guards): asyncio's
     * Timeout._on_timeout (bound methods of it, through call_at) and 3.11's wait_for timer
     * (tasks._release_waiter, through call_later; None from 3.12). */
    PyObject *guarded_at;
    PyObject *guarded_later;
    PyObject *handle_repr; /* aiowheel._time._handles.handle_repr, imported on first use */
    PyObject *empty_tuple; /* () */
    PyObject *str_context;
    PyObject *str_call_exception_handler;
    PyObject *str_call_soon;
#ifndef Py_GIL_DISABLED
    PyObject *spare_context; /* handle_call's empty context, kept for the next run (or NULL) */
    karray scratch[2];       /* a due pass's two arrays, kept for the next pass (due.c) */
#endif
};

/* Defined in module.c; core_new finds its module (its type's) through it. */
static struct PyModuleDef core_module;

/* The free list of handles stays process-wide, and exists on GIL builds only (FREELIST_MAX).
 * A freed handle is put on it by its dealloc, which has no Core to go through (a handle that
 * has run or was cancelled holds none) and would pay a type-to-module lookup per free for a
 * per-module list; one list serves every module object alike (handle_new sets the type), and
 * the GIL serializes it. Subinterpreters do not load the module at all
 * (Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED, module.c). */
static HandleObject *freelist = NULL;
static int freelist_len = 0;

/* Tests only (module.c's _fail_allocations): which attempt from now to allocate a Core's heap
 * of bucket expirations fails with MemoryError (1: the next; 0: none). Read only where the heap
 * is allocated (wheel.c's heap_alloc, once per Core), never on a hot path; process-wide like the
 * free list, and unsynchronized: a test sets it with no other thread making a Core. */
static Py_ssize_t heap_fail_after = 0;

#endif /* AIOWHEEL_NATIVE_CORE_H */
