#include <Python.h>
#include <structmember.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define NEVER_TICK ((int64_t)1 << 62)     /* ticks at or beyond: never due */
#define PAST_TICK (-((int64_t)1 << 62))   /* ticks below are clamped here */
#define UNQUEUED (((int64_t)1 << 62) - 1) /* aiowheel._wheel.UNQUEUED */
#define QUEUED_NONE INT64_MAX             /* a bucket queued under no expiration */
#define TICK_EPSILON 1e-6                 /* aiowheel._engine._TICK_EPSILON */

/* A handle's fate once it is out of the wheel, kept in its tick (aiowheel._handles). */
#define DISPATCHED (-1)
#define RAN (-2)
#define CANCELLED (-3)
/* Out-of-wheel ticks are only these three; a pending handle's tick is its deadline tick. */

/* Before 3.13 there are no critical sections, and no free-threaded build to need them. */
#ifndef Py_BEGIN_CRITICAL_SECTION
#define Py_BEGIN_CRITICAL_SECTION(op) {
#define Py_END_CRITICAL_SECTION() }
#endif

/* The ASan build (.ci/asan-suite) frees every handle for real; see above for free-threading. */
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

/* A handle is an asyncio.TimerHandle (isinstance, issue 37), so it is laid out in that class's
 * own __slots__ and no more: Handle's _args, _callback, _cancelled, _context, _loop, _repr,
 * _source_traceback (in CPython's order, sorted; before 3.12 then __weakref__, later kept
 * before the object), TimerHandle's _scheduled, _when. The callback, its arguments and its
 * context live in asyncio's own three slots; the wheel's fields (tick, link, when, core) are
 * stored over the six asyncio slots a handle has no use for, and the getsets below answer for
 * every one of those names (none of asyncio's member descriptors is reachable through the
 * type), so nothing reads them as objects. That keeps what a wheel walk and a run touch within
 * the object's first 80 bytes (two cache lines at most, as before issue 37; with the wheel's
 * fields after asyncio's slots, a 136-byte object on 3.11, a due timer's walk and run touched
 * two or three: 1.5-2x the time of 0.5 to run 50,000 due timers) and the handle at asyncio's
 * size. Module init checks every offset and the
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
    void *spare;      /* over _when: unused */
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
#else
    (void)h;
#endif
}

typedef struct {
    int64_t expiration;
    Py_ssize_t index;
} heapitem;

struct CoreObject {
    PyObject_HEAD
    /* the wheel */
    int bits;
    int levels;
    int64_t mask;
    Py_ssize_t nbuckets;
    link_t *buckets;
    int64_t *queued;
    heapitem *heap;
    Py_ssize_t heap_len;
    Py_ssize_t heap_cap;
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
    PyObject *clock; /* NULL: CLOCK_MONOTONIC read natively */
    int64_t armed;   /* the engine's armed expiration (its _armed, mirrored) */
    PyObject *arm;   /* the engine's _arm */
    PyObject *claim; /* the engine's take-over check for a cancel from another thread, or NULL */
    /* loop mode's routing */
    int fast;  /* the engine lets call_at / call_later file here directly */
    int debug; /* the loop's debug mode: cancel() checks the thread */
    unsigned long thread_id;
    double threshold;
    double near_pad;
    PyObject *near_call_at;
    PyObject *near_call_later;
    PyObject *slow_call_at;
    PyObject *slow_call_later;
};

static PyTypeObject *HandleType; /* a subclass of asyncio.TimerHandle, made at init */
static PyTypeObject CoreType;

/* Set once by setup(): aiowheel._handles' helpers. */
static PyObject *g_callback_repr = NULL;
static PyObject *g_empty_context = NULL;
static PyObject *g_empty_tuple = NULL; /* () */
static PyObject *g_get_running_loop = NULL;
static PyObject *g_str_context = NULL;
static PyObject *g_str_call_exception_handler = NULL;
static PyObject *g_str_call_soon = NULL;

static HandleObject *freelist = NULL;
static int freelist_len = 0;

