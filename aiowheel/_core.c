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

#define PY_SSIZE_T_CLEAN
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

/* -- the clock ------------------------------------------------------------------------------ */

static int
core_now(CoreObject *c, double *now)
{
    if (c->clock == NULL) {
#ifdef __linux__
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        /* CPython's _PyTime_AsSecondsDouble of the nanosecond count: the same float. It
         * divides a whole number of seconds as an integer first; below 2**53 ns (104 days of
         * uptime) the count converts exactly, and IEEE division of an exact multiple of 1e9 is
         * then exact too, so one float division gives the same bits without the 64-bit modulo
         * (measured: the modulo was a third of this function's time). */
        int64_t t = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
        if (t < ((int64_t)1 << 53)) {
            *now = (double)t / 1e9;
            return 0;
        }
        volatile double d;
        if (t % 1000000000 == 0) {
            d = (double)(t / 1000000000);
        }
        else {
            d = (double)t;
            d /= 1e9;
        }
        *now = d;
        return 0;
#endif
    }
    PyObject *res = c->clock ? PyObject_CallNoArgs(c->clock) : NULL;
    if (res == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_RuntimeError, "aiowheel: no clock");
        }
        return -1;
    }
    double d = PyFloat_AsDouble(res);
    Py_DECREF(res);
    if (d == -1.0 && PyErr_Occurred()) {
        return -1;
    }
    *now = d;
    return 0;
}

static inline int64_t
tick_for(CoreObject *c, double when)
{
    double t = ceil((when - c->epoch) * c->inv_tick - TICK_EPSILON);
    if (t >= (double)NEVER_TICK) {
        return NEVER_TICK;
    }
    if (!(t >= (double)PAST_TICK)) {
        return PAST_TICK;
    }
    return (int64_t)t;
}

/* -- the delay queue ------------------------------------------------------------------------ */

static inline int
item_less(heapitem a, heapitem b)
{
    return a.expiration < b.expiration || (a.expiration == b.expiration && a.index < b.index);
}

static int
heap_push(CoreObject *c, int64_t expiration, Py_ssize_t index)
{
    if (c->heap_len == c->heap_cap) {
        Py_ssize_t cap = c->heap_cap ? c->heap_cap * 2 : 16;
        heapitem *heap = PyMem_Realloc(c->heap, cap * sizeof(heapitem));
        if (heap == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        c->heap = heap;
        c->heap_cap = cap;
    }
    heapitem item = {expiration, index};
    Py_ssize_t pos = c->heap_len++;
    while (pos > 0) {
        Py_ssize_t parent = (pos - 1) >> 1;
        if (!item_less(item, c->heap[parent])) {
            break;
        }
        c->heap[pos] = c->heap[parent];
        pos = parent;
    }
    c->heap[pos] = item;
    return 0;
}

static void
heap_pop(CoreObject *c)
{
    heapitem last = c->heap[--c->heap_len];
    Py_ssize_t n = c->heap_len;
    if (n == 0) {
        return;
    }
    Py_ssize_t pos = 0;
    for (;;) {
        Py_ssize_t child = 2 * pos + 1;
        if (child >= n) {
            break;
        }
        if (child + 1 < n && item_less(c->heap[child + 1], c->heap[child])) {
            child++;
        }
        if (!item_less(c->heap[child], last)) {
            break;
        }
        c->heap[pos] = c->heap[child];
        pos = child;
    }
    c->heap[pos] = last;
}

/* -- the wheel (aiowheel/_wheel.py's Wheel, for handles) ------------------------------------- */

static inline void
link_tail(link_t *bucket, link_t *l)
{
    link_t *tail = bucket->prev;
    l->prev = tail;
    l->next = bucket;
    bucket->prev = l;
    tail->next = l;
}

static inline void
set_elapsed(CoreObject *c, int64_t tick)
{
    c->elapsed = tick;
    c->cache_high = c->cache_low; /* placements depend on elapsed */
}

static inline int64_t
low_mask(int shift)
{
    return ~(((int64_t)1 << shift) - 1); /* -(1 << shift) */
}

/* Wheel.insert: the handle's reference is the wheel's from now on. -1 on a memory error (the
 * handle is then filed all the same, its bucket unqueued only if the heap could not grow). */
static int64_t
wheel_insert(CoreObject *c, HandleObject *h, int64_t tick)
{
    Py_ssize_t index;
    int64_t expiration;
    h->tick = tick;
    c->count++;
    if (tick >= NEVER_TICK) {
        link_tail(&c->never, &h->link);
        return UNQUEUED;
    }
    if (c->cache_low <= tick && tick < c->cache_high) {
        index = c->cache_index;
        expiration = c->cache_expiration;
    }
    else {
        int64_t elapsed = c->elapsed;
        if (tick >= elapsed) {
            uint64_t distance = (uint64_t)(tick - elapsed);
            int length = distance ? 64 - __builtin_clzll(distance) : 0;
            int level = c->level_of[length];
            int shift = level * c->bits;
            int64_t window = elapsed & low_mask(shift);
            if (shift + c->bits < 63 && tick >= window + ((int64_t)1 << (shift + c->bits))) {
                level += 1;
                shift += c->bits;
            }
            index = ((Py_ssize_t)level << c->bits) + (Py_ssize_t)((tick >> shift) & c->mask);
            expiration = tick & low_mask(shift);
            int64_t low = expiration;
            if (level) {
                int64_t finer = (elapsed & low_mask(shift - c->bits)) + ((int64_t)1 << shift);
                if (finer > low) {
                    low = finer;
                }
            }
            c->cache_low = low;
            c->cache_high = expiration + ((int64_t)1 << shift);
            c->cache_index = index;
            c->cache_expiration = expiration;
        }
        else {
            index = (Py_ssize_t)(elapsed & c->mask);
            expiration = elapsed;
        }
    }
    link_tail(&c->buckets[index], &h->link);
    if (expiration < c->queued[index]) {
        c->queued[index] = expiration;
        if (heap_push(c, expiration, index) < 0) {
            c->queued[index] = QUEUED_NONE;
            return -1;
        }
        return expiration;
    }
    return UNQUEUED;
}

static inline void
wheel_unlink(CoreObject *c, HandleObject *h)
{
    link_t *prev = h->link.prev;
    link_t *next = h->link.next;
    prev->next = next;
    next->prev = prev;
    h->link.prev = h->link.next = NULL;
    c->count--;
}

static int64_t
next_expiration(CoreObject *c)
{
    while (c->heap_len) {
        heapitem top = c->heap[0];
        if (c->queued[top.index] == top.expiration) {
            link_t *bucket = &c->buckets[top.index];
            if (bucket->next != bucket) {
                return top.expiration;
            }
            c->queued[top.index] = QUEUED_NONE;
        }
        heap_pop(c);
    }
    return QUEUED_NONE;
}

/* A growable array of handles (owned references). */
typedef struct {
    HandleObject **items;
    Py_ssize_t len;
    Py_ssize_t cap;
} harray;

static int
harray_append(harray *a, HandleObject *h)
{
    if (a->len == a->cap) {
        Py_ssize_t cap = a->cap ? a->cap * 2 : 64;
        HandleObject **items = PyMem_Realloc(a->items, cap * sizeof(HandleObject *));
        if (items == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        a->items = items;
        a->cap = cap;
    }
    a->items[a->len++] = h;
    return 0;
}

/* Stable merge sort of handles by tick (by_when == 0) or by deadline (by_when == 1). It sorts
 * (key, handle) pairs: the comparisons read a contiguous array, not each handle's field (a due
 * batch's handles are scattered in memory: 50,000 due at once took one cache miss per handle
 * per merge pass, most of the time an advance took). */
typedef struct {
    union {
        int64_t tick;
        double when;
    } key;
    HandleObject *h;
} keyed;

static inline int
keyed_before(const keyed *a, const keyed *b, int by_when)
{
    return by_when ? b->key.when < a->key.when : b->key.tick < a->key.tick; /* b goes first */
}

static int
stable_sort(HandleObject **items, Py_ssize_t n, int by_when)
{
    /* A natural merge sort: the ascending runs found in one pass, then merged pairwise. A due
     * batch is mostly in order already (timers filed with one delay come in deadline order),
     * so it takes a pass or a few, where a plain bottom-up merge sort takes log2(n) (50k timers
     * due at once in 1,000 interleaved runs of deadlines: 6 passes instead of 16). */
    if (n < 2) {
        return 0;
    }
    keyed *a = PyMem_Malloc(n * sizeof(keyed));
    keyed *tmp = PyMem_Malloc(n * sizeof(keyed));
    Py_ssize_t *runs = PyMem_Malloc((n + 1) * sizeof(Py_ssize_t));
    if (a == NULL || tmp == NULL || runs == NULL) {
        PyMem_Free(a);
        PyMem_Free(tmp);
        PyMem_Free(runs);
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t nruns = 0;
    runs[nruns++] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        a[i].h = items[i];
        if (by_when) {
            a[i].key.when = items[i]->when;
        }
        else {
            a[i].key.tick = items[i]->tick;
        }
        if (i && keyed_before(&a[i - 1], &a[i], by_when)) {
            runs[nruns++] = i; /* a[i] goes before its predecessor: a new run */
        }
    }
    runs[nruns] = n;
    while (nruns > 1) {
        Py_ssize_t merged = 0, r = 0;
        for (; r + 1 < nruns; r += 2) {
            Py_ssize_t lo = runs[r], mid = runs[r + 1], hi = runs[r + 2];
            Py_ssize_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                if (keyed_before(&a[i], &a[j], by_when)) {
                    tmp[k++] = a[j++];
                }
                else {
                    tmp[k++] = a[i++]; /* equal keys: the left run first (stable) */
                }
            }
            while (i < mid) {
                tmp[k++] = a[i++];
            }
            while (j < hi) {
                tmp[k++] = a[j++];
            }
            memcpy(a + lo, tmp + lo, (hi - lo) * sizeof(keyed));
            runs[merged++] = lo;
        }
        if (r < nruns) {
            runs[merged++] = runs[r]; /* an odd run out: merged on the next pass */
        }
        runs[merged] = n;
        nruns = merged;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        items[i] = a[i].h;
    }
    PyMem_Free(runs);
    PyMem_Free(tmp);
    PyMem_Free(a);
    return 0;
}

/* Wheel.advance: every handle whose tick is <= now, in tick order, into `due`. */
static int
wheel_advance(CoreObject *c, int64_t now, harray *due)
{
    int in_order = 1;
    Py_ssize_t first = due->len;
    while (c->heap_len && c->heap[0].expiration <= now) {
        heapitem top = c->heap[0];
        heap_pop(c);
        int64_t expiration = top.expiration;
        Py_ssize_t index = top.index;
        if (c->queued[index] != expiration) {
            continue; /* superseded by an earlier expiration of the same bucket */
        }
        c->queued[index] = QUEUED_NONE;
        link_t *bucket = &c->buckets[index];
        link_t *l = bucket->next;
        if (l == bucket) {
            continue; /* emptied by removals */
        }
        bucket->prev->next = NULL;
        bucket->next = bucket->prev = bucket;
        if (expiration > c->elapsed) {
            set_elapsed(c, expiration);
        }
        int64_t level0_end = c->elapsed + c->mask + 1;
        while (l != NULL) {
            link_t *next = l->next;
            HandleObject *h = HANDLE_OF(l);
            int64_t tick = h->tick;
            if (tick <= now) {
                l->prev = l->next = NULL;
                c->count--;
                if (tick != expiration) {
                    in_order = 0;
                }
                if (harray_append(due, h) < 0) {
                    /* Back into the elapsed tick's bucket: due at the next advance. */
                    c->count++;
                    Py_ssize_t at = (Py_ssize_t)(c->elapsed & c->mask);
                    link_tail(&c->buckets[at], l);
                    if (c->elapsed < c->queued[at] && heap_push(c, c->elapsed, at) == 0) {
                        c->queued[at] = c->elapsed;
                    }
                    l = next;
                    while (l != NULL) { /* and the rest of the chain likewise */
                        link_t *after = l->next;
                        link_tail(&c->buckets[at], l);
                        l = after;
                    }
                    return -1;
                }
            }
            else if (tick < level0_end) {
                Py_ssize_t at = (Py_ssize_t)(tick & c->mask);
                link_tail(&c->buckets[at], l);
                if (tick < c->queued[at]) {
                    c->queued[at] = tick;
                    if (heap_push(c, tick, at) < 0) {
                        c->queued[at] = QUEUED_NONE;
                    }
                }
            }
            else {
                l->prev = l->next = NULL;
                c->count--;
                wheel_insert(c, h, tick);
            }
            l = next;
        }
    }
    set_elapsed(c, now);
    if (!in_order && stable_sort(due->items + first, due->len - first, 0) < 0) {
        return -1;
    }
    return 0;
}

/* Every pending handle, unlinked (owned references into `out`). */
static int
wheel_drain(CoreObject *c, harray *out)
{
    for (Py_ssize_t i = 0; i <= c->nbuckets; i++) {
        link_t *bucket = i < c->nbuckets ? &c->buckets[i] : &c->never;
        link_t *l = bucket->next;
        while (l != bucket) {
            link_t *next = l->next;
            l->prev = l->next = NULL;
            if (out == NULL || harray_append(out, HANDLE_OF(l)) < 0) {
                /* No room to hand it back: let it go here, cancelled. */
                HandleObject *h = HANDLE_OF(l);
                h->tick = CANCELLED;
                Py_CLEAR(h->callback);
                Py_CLEAR(h->args);
                Py_DECREF(h);
            }
            l = next;
        }
        bucket->next = bucket->prev = bucket;
    }
    for (Py_ssize_t i = 0; i < c->nbuckets; i++) {
        c->queued[i] = QUEUED_NONE;
    }
    c->heap_len = 0;
    c->count = 0;
    c->cache_high = c->cache_low;
    return out != NULL && PyErr_Occurred() ? -1 : 0;
}

/* -- TimerHandle ---------------------------------------------------------------------------- */

static HandleObject *
handle_new(void)
{
    HandleObject *h;
    if (freelist != NULL) {
        h = freelist;
        freelist = (HandleObject *)h->link.next;
        freelist_len--;
        PyObject_Init((PyObject *)h, HandleType);
    }
    else {
        /* Not tracked, ever: see the top. Before 3.12 the weak reference list is among the
         * slots: it starts NULL (and a dealloc's PyObject_ClearWeakRefs leaves it NULL). */
        h = PyObject_GC_New(HandleObject, HandleType);
        if (h == NULL) {
            return NULL;
        }
        memset(&h->args, 0, sizeof(HandleObject) - offsetof(HandleObject, args));
    }
    h->link.prev = h->link.next = NULL;
    h->core = NULL;
    h->callback = h->args = h->context = NULL;
    h->tick = CANCELLED;
    return h;
}

static void
handle_dealloc(HandleObject *h)
{
    /* asyncio's handles take weak references (few do: with the GIL the call is skipped while
     * the list is empty; on a free-threaded build the list is CPython's to read). */
#ifdef Py_GIL_DISABLED
    PyObject_ClearWeakRefs((PyObject *)h);
#else
    if (*(PyObject **)((char *)h + HandleType->tp_weaklistoffset) != NULL) {
        PyObject_ClearWeakRefs((PyObject *)h);
    }
#endif
#ifdef Py_GIL_DISABLED
    Py_CLEAR(h->core);
#endif
    Py_CLEAR(h->callback);
    Py_CLEAR(h->args);
    Py_CLEAR(h->context);
#ifndef Py_GIL_DISABLED
    /* The instance's reference to its heap type. On a free-threaded build it is left to the
     * thread-local count PyObject_Init added it to: a Py_DECREF here would be an atomic write
     * to the one type object from every thread (the contention issue 37 removed for the empty
     * context); the type lives as long as the module, which holds it. */
    Py_DECREF(HandleType);
#endif
    if (freelist_len < FREELIST_MAX) {
        h->link.next = (link_t *)freelist;
        freelist = h;
        freelist_len++;
    }
    else {
        PyObject_GC_Del(h);
    }
}

/* Never called by the collector (handles are not tracked: the Core reports what a pending one
 * holds); gc.get_referents reads it. */
static int
handle_traverse(HandleObject *h, visitproc visit, void *arg)
{
    Py_VISIT(h->callback);
    Py_VISIT(h->args);
    Py_VISIT(h->context);
    return 0;
}

/* Never called either (not tracked); set so that asyncio's (inherited otherwise) never clears
 * its slots, where the wheel's fields are stored. */
static int
handle_clear(HandleObject *Py_UNUSED(h))
{
    return 0;
}

static PyObject *
callback_repr(PyObject *callback)
{
    if (g_callback_repr == NULL) {
        return PyObject_Repr(callback);
    }
    return PyObject_CallOneArg(g_callback_repr, callback);
}

static PyObject *g_handle_repr = NULL; /* aiowheel._handles.handle_repr, imported on first use */

/* asyncio's repr (<TimerHandle when=... callback() at file:line>, "cancelled" after cancel()),
 * made by the same Python function as the pure build's; nothing on the hot path asks for it. */
static PyObject *
handle_repr(HandleObject *h)
{
    if (g_handle_repr == NULL) {
        PyObject *module = PyImport_ImportModule("aiowheel._handles");
        if (module == NULL) {
            return NULL;
        }
        PyObject *func = PyObject_GetAttrString(module, "handle_repr");
        Py_DECREF(module);
        if (func == NULL) {
            return NULL;
        }
        Py_XSETREF(g_handle_repr, func);
    }
    return PyObject_CallOneArg(g_handle_repr, (PyObject *)h);
}

static PyObject *
handle_when(HandleObject *h, PyObject *Py_UNUSED(ignored))
{
    return PyFloat_FromDouble(h->when);
}

static PyObject *
handle_get_context(HandleObject *h, PyObject *Py_UNUSED(ignored))
{
    if (h->context == NULL || h->context == g_empty_context) {
        return PyContext_New();
    }
    return Py_NewRef(h->context);
}

/* On a free-threaded build every cancel() is checked for its thread, as the engine's own
 * (aiowheel._engine._FREE_THREADED); with the GIL only in debug mode, and only while the handle
 * is pending (a due handle's core may be gone there: it holds no reference to it). */
#ifdef Py_GIL_DISABLED
#define ALWAYS_CHECK_THREAD 1
#else
#define ALWAYS_CHECK_THREAD 0
#endif

static PyObject *
handle_cancel(HandleObject *h, PyObject *Py_UNUSED(ignored))
{
    /* What the handle lets go of is released after the critical section: a callback's or an
     * argument's finalizer may run any code. */
    PyObject *callback = NULL, *args = NULL, *result = Py_False, *claim = NULL;
    int pending = 0, checked = 0;
again:
    Py_BEGIN_CRITICAL_SECTION(h->core); /* a Core is alive while it is set (see above) */
    CoreObject *c = h->core;
    int live = h->link.prev != NULL || (ALWAYS_CHECK_THREAD && c != NULL && h->tick == DISPATCHED);
    if (live && !checked && (c->debug || ALWAYS_CHECK_THREAD) &&
        PyThread_get_thread_ident() != c->thread_id) {
        /* Another thread: the engine says whether it may take the loop over (its loop is not
         * running) or refuses, before anything changes; asked outside the critical section. */
        claim = c->claim != NULL ? Py_NewRef(c->claim) : Py_NewRef(Py_None);
        result = NULL;
    }
    else if (h->link.prev != NULL) {
        wheel_unlink(c, h);
        c->removed++;
        pending = 1;
    }
    if (result != NULL && (pending || h->tick == DISPATCHED)) {
        h->tick = CANCELLED;
        callback = h->callback;
        args = h->args;
        h->callback = h->args = NULL;
        result = Py_True;
    }
    Py_END_CRITICAL_SECTION();
    if (result == NULL) {
        if (claim != Py_None) { /* a Core made without an engine (tests) has none to ask */
            PyObject *res = PyObject_CallNoArgs(claim);
            Py_DECREF(claim);
            if (res == NULL) {
                return NULL;
            }
            Py_DECREF(res);
        }
        else {
            Py_DECREF(claim);
        }
        claim = NULL;
        checked = 1;
        result = Py_False;
        goto again;
    }
    if (pending) {
        Py_DECREF(h); /* the wheel's reference: the caller holds one */
    }
    Py_XDECREF(callback);
    Py_XDECREF(args);
    return Py_NewRef(result);
}

static PyObject *
handle_cancelled(HandleObject *h, PyObject *Py_UNUSED(ignored))
{
    return PyBool_FromLong(h->link.prev == NULL && h->tick == CANCELLED);
}

static PyObject *
handle_pending(HandleObject *h, PyObject *Py_UNUSED(ignored))
{
    return PyBool_FromLong(h->link.prev != NULL);
}

/* Report an exception of a callback as the loop reports its own callbacks'. */
static int
report(HandleObject *h, PyObject *callback)
{
    PyObject *exc;
#if PY_VERSION_HEX >= 0x030C0000
    exc = PyErr_GetRaisedException();
#else
    PyObject *type, *tb;
    PyErr_Fetch(&type, &exc, &tb);
    PyErr_NormalizeException(&type, &exc, &tb);
    if (tb != NULL && exc != NULL) {
        PyException_SetTraceback(exc, tb);
    }
    Py_XDECREF(type);
    Py_XDECREF(tb);
#endif
    if (exc == NULL) {
        return 0;
    }
    int status = -1;
    PyObject *loop = NULL, *name = NULL, *message = NULL, *ctx = NULL, *res = NULL;
    loop = PyObject_CallNoArgs(g_get_running_loop);
    if (loop == NULL) {
        goto done;
    }
    name = callback_repr(callback);
    if (name == NULL) {
        goto done;
    }
    message = PyUnicode_FromFormat("Exception in callback %U", name);
    if (message == NULL) {
        goto done;
    }
    ctx = Py_BuildValue("{sOsOsO}", "message", message, "exception", exc, "handle", (PyObject *)h);
    if (ctx == NULL) {
        goto done;
    }
    res = PyObject_CallMethodOneArg(loop, g_str_call_exception_handler, ctx);
    if (res != NULL) {
        status = 0;
    }
done:
    Py_XDECREF(res);
    Py_XDECREF(ctx);
    Py_XDECREF(message);
    Py_XDECREF(name);
    Py_XDECREF(loop);
    Py_DECREF(exc);
    return status;
}

/* TimerHandle._run: run the callback in its context; -1 only for what must leave the loop
 * (SystemExit, KeyboardInterrupt, or a failing exception handler). */
static int
handle_run(HandleObject *h)
{
    PyObject *callback = NULL, *args = NULL, *context = NULL;
    Py_BEGIN_CRITICAL_SECTION(h->core); /* against a cancel() from another thread */
    if (h->tick == DISPATCHED) { /* else cancelled after it was dispatched */
        h->tick = RAN;
        if (h->callback != NULL && h->args != NULL) {
            callback = Py_NewRef(h->callback);
            args = Py_NewRef(h->args);
            context = Py_XNewRef(h->context); /* NULL: scheduled from an empty context */
        }
    }
    Py_END_CRITICAL_SECTION();
    if (callback == NULL) {
        return 0;
    }
    if (context == NULL || context == g_empty_context) {
        Py_XSETREF(context, PyContext_New()); /* a fresh one per run: nothing leaks between runs */
        if (context == NULL) {
            Py_DECREF(callback);
            Py_DECREF(args);
            return -1;
        }
    }
    PyObject *res = NULL;
    if (PyContext_Enter(context) == 0) {
        res = PyObject_Vectorcall(callback, &PyTuple_GET_ITEM(args, 0), PyTuple_GET_SIZE(args),
                                  NULL);
        PyContext_Exit(context);
    }
    int status = 0;
    if (res == NULL) {
        if (PyErr_ExceptionMatches(PyExc_SystemExit) ||
            PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {
            status = -1;
        }
        else {
            status = report(h, callback);
        }
    }
    else {
        Py_DECREF(res);
    }
    Py_DECREF(callback);
    Py_DECREF(args);
    Py_DECREF(context);
    return status;
}

static PyObject *
handle_run_method(HandleObject *h, PyObject *Py_UNUSED(ignored))
{
    if (handle_run(h) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
handle_describe(HandleObject *h, PyObject *Py_UNUSED(ignored))
{
    return Py_BuildValue("(sOO)", "call", h->callback ? h->callback : Py_None,
                         h->args ? h->args : Py_None);
}

static PyObject *
handle_abandon(HandleObject *h, PyObject *Py_UNUSED(exc))
{
    h->tick = CANCELLED;
    Py_CLEAR(h->callback);
    Py_CLEAR(h->args);
    Py_RETURN_NONE;
}

static PyMethodDef handle_methods[] = {
    {"when", (PyCFunction)handle_when, METH_NOARGS,
     "when($self, /)\n--\n\nThe deadline, in the loop's clock, exactly as scheduled."},
    {"get_context", (PyCFunction)handle_get_context, METH_NOARGS,
     "get_context($self, /)\n--\n\nThe context the callback runs in (as "
     "``asyncio.Handle.get_context``).\n\nA callback scheduled from an empty context runs in a "
     "fresh empty context each time;\nfor it this returns a new empty Context."},
    {"cancel", (PyCFunction)handle_cancel, METH_NOARGS,
     "cancel($self, /)\n--\n\nCancel the callback. True if this call cancelled it; False if it "
     "had already run\nor been cancelled. A pending handle leaves the wheel at once (O(1))."},
    {"cancelled", (PyCFunction)handle_cancelled, METH_NOARGS,
     "cancelled($self, /)\n--\n\nTrue if :meth:`cancel` cancelled this handle (or its timer "
     "closed before it ran)."},
    {"pending", (PyCFunction)handle_pending, METH_NOARGS,
     "pending($self, /)\n--\n\nTrue while the handle is in a wheel (neither cancelled nor "
     "handed over to run)."},
    {"_run", (PyCFunction)handle_run_method, METH_NOARGS, NULL},
    {"_describe", (PyCFunction)handle_describe, METH_NOARGS, NULL},
    {"_abandon", (PyCFunction)handle_abandon, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};

/* asyncio.TimerHandle's attributes, read from the native fields: its __eq__, __lt__ and
 * __hash__ read _when, _callback, _args and _cancelled. Every slot name of asyncio's has a
 * getset here (and none a setter), so asyncio's member descriptors, which would read the wheel's
 * fields stored over its slots as objects, are never reached. _loop is not kept (a handle holds
 * no loop); reading it raises AttributeError, as an empty slot's descriptor did. */
static PyObject *
handle_get_when(HandleObject *h, void *Py_UNUSED(closure))
{
    return PyFloat_FromDouble(h->when);
}

static PyObject *
handle_get_callback(HandleObject *h, void *Py_UNUSED(closure))
{
    return Py_NewRef(h->callback != NULL ? h->callback : Py_None);
}

static PyObject *
handle_get_args(HandleObject *h, void *Py_UNUSED(closure))
{
    return Py_NewRef(h->args != NULL ? h->args : Py_None);
}

static PyObject *
handle_get_cancelled(HandleObject *h, void *Py_UNUSED(closure))
{
    return handle_cancelled(h, NULL);
}

static PyObject *
handle_get_scheduled(HandleObject *h, void *Py_UNUSED(closure))
{
    return handle_pending(h, NULL);
}

static PyObject *
handle_get_none(HandleObject *Py_UNUSED(h), void *Py_UNUSED(closure))
{
    Py_RETURN_NONE;
}

static PyObject *
handle_get_context_attr(HandleObject *h, void *Py_UNUSED(closure))
{
    return handle_get_context(h, NULL);
}

static PyObject *
handle_get_loop(HandleObject *h, void *Py_UNUSED(closure))
{
    return PyErr_Format(PyExc_AttributeError, "'%.200s' object has no attribute '_loop'",
                        Py_TYPE(h)->tp_name);
}

static PyGetSetDef handle_getset[] = {
    {"_loop", (getter)handle_get_loop, NULL, NULL, NULL},
    {"_when", (getter)handle_get_when, NULL, NULL, NULL},
    {"_callback", (getter)handle_get_callback, NULL, NULL, NULL},
    {"_args", (getter)handle_get_args, NULL, NULL, NULL},
    {"_context", (getter)handle_get_context_attr, NULL, NULL, NULL},
    {"_cancelled", (getter)handle_get_cancelled, NULL, NULL, NULL},
    {"_scheduled", (getter)handle_get_scheduled, NULL, NULL, NULL},
    {"_source_traceback", (getter)handle_get_none, NULL, NULL, NULL},
    {"_repr", (getter)handle_get_none, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot handle_slots[] = {
    {Py_tp_dealloc, handle_dealloc},
    {Py_tp_traverse, handle_traverse},
    {Py_tp_clear, handle_clear},
    {Py_tp_repr, handle_repr},
    {Py_tp_methods, handle_methods},
    {Py_tp_getset, handle_getset},
    {Py_tp_doc,
     "A callback scheduled with :meth:`Timer.call_at` or :meth:`Timer.call_later` (or a "
     "loop-mode loop's ``call_at`` / ``call_later``).\n\n"
     "An :class:`asyncio.TimerHandle`, but :meth:`cancel` is O(1), frees the timer at once "
     "and\ntells whether it did anything."},
    {0, NULL},
};

/* A heap type: CPython refuses a static type whose base (asyncio.TimerHandle) is a heap type. */
static PyType_Spec handle_spec = {
    .name = "aiowheel.TimerHandle",
    .basicsize = sizeof(HandleObject),
    /* Not Py_TPFLAGS_IMMUTABLETYPE: 3.14 refuses it over asyncio's mutable class. */
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = handle_slots,
};

/* -- Core: filing --------------------------------------------------------------------------- */

static int
core_arm_if_earlier(CoreObject *c, int64_t queued)
{
    if (queued < 0) {
        return -1; /* memory error */
    }
    if (queued < c->armed && c->arm != NULL) {
        PyObject *res = PyObject_CallNoArgs(c->arm);
        if (res == NULL) {
            return -1;
        }
        Py_DECREF(res);
    }
    return 0;
}

/* Whether the thread's current context holds no variable. Then the handle keeps the shared
 * empty context and handle_run makes a fresh one per run (what a copy would have been), so the
 * common case (no context variable set: every benchmark, most servers) allocates no context
 * per timer: a copy is a GC-tracked object allocated here and freed at cancel(), ~10% of a
 * schedule + cancel. The thread state's `context` is the current one (NULL before any is
 * made); reading its length copies nothing. */
static inline int
current_context_is_empty(void)
{
    PyObject *current = PyThreadState_GET()->context;
    /* PyObject_Length, without its checks: a context is a mapping that cannot fail to tell. */
    return current == NULL || Py_TYPE(current)->tp_as_mapping->mp_length(current) == 0;
}

/* File callback(*args) for `when` in `context` (NULL: a copy of the current one). */
static PyObject *
core_file(CoreObject *c, double when, PyObject *callback, PyObject *const *args,
          Py_ssize_t nargs, PyObject *context)
{
    if (when != when) {
        PyErr_SetString(PyExc_ValueError, "deadline must not be NaN");
        return NULL;
    }
    int64_t tick = tick_for(c, when);
    if (tick >= NEVER_TICK && when != INFINITY) {
        /* A finite deadline 2**62 ticks or more past the epoch (a virtual clock moved that
         * far): beyond the core's int64 grid, where it would never come due. The engine's
         * wheel (Python ints) files it: NotImplemented says so to every caller. */
        Py_RETURN_NOTIMPLEMENTED;
    }
    HandleObject *h = handle_new();
    if (h == NULL) {
        return NULL;
    }
    h->callback = NULL;
    h->args = NULL;
    h->context = NULL;
    h->when = when;
    h->tick = CANCELLED;
    if (context == NULL && current_context_is_empty()) {
        /* No reference at all (NULL, not the shared empty context): on a free-threaded build
         * one object's refcount written by every thread's timers is contended (loop mode's
         * churn scaled 1.6x on 2 threads with it, issue 37). */
        context = NULL;
    }
    else if (context == NULL) {
        context = PyContext_CopyCurrent();
        if (context == NULL) {
            Py_DECREF(h);
            return NULL;
        }
    }
    else {
        Py_INCREF(context);
    }
    h->context = context;
    /* The empty tuple is a singleton: no call needed for the common callback(). */
    PyObject *tuple = nargs == 0 ? Py_NewRef(g_empty_tuple) : PyTuple_New(nargs);
    if (tuple == NULL) {
        Py_DECREF(h);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        PyTuple_SET_ITEM(tuple, i, Py_NewRef(args[i]));
    }
    h->args = tuple;
    h->callback = Py_NewRef(callback);
#ifdef Py_GIL_DISABLED
    h->core = (CoreObject *)Py_NewRef((PyObject *)c); /* released in handle_dealloc */
#else
    h->core = c;
#endif
    Py_INCREF(h); /* the wheel's */
    if (core_arm_if_earlier(c, wheel_insert(c, h, tick)) < 0) {
        Py_DECREF(h);
        return NULL;
    }
    return (PyObject *)h;
}

static PyObject *
core_file_locked(CoreObject *c, double when, PyObject *callback, PyObject *const *args,
                 Py_ssize_t nargs, PyObject *context)
{
    PyObject *res;
    Py_BEGIN_CRITICAL_SECTION(c);
    res = core_file(c, when, callback, args, nargs, context);
    Py_END_CRITICAL_SECTION();
    return res;
}

static PyObject *
core_file_method(CoreObject *c, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyTuple_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "file(when, callback, args: tuple, context)");
        return NULL;
    }
    double when = PyFloat_AsDouble(args[0]);
    if (when == -1.0 && PyErr_Occurred()) {
        return NULL;
    }
    PyObject *tuple = args[2];
    return core_file_locked(c, when, args[1], &PyTuple_GET_ITEM(tuple, 0),
                            PyTuple_GET_SIZE(tuple), args[3] == Py_None ? NULL : args[3]);
}

/* A deadline as the router reads it: 1 for a float, or an int that converts exactly. */
static inline int
as_seconds(PyObject *value, double *out)
{
    if (PyFloat_CheckExact(value)) {
        *out = PyFloat_AS_DOUBLE(value);
        return 1;
    }
    if (PyLong_CheckExact(value)) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (overflow || v <= -(1LL << 53) || v >= (1LL << 53)) {
            return 0;
        }
        *out = (double)v;
        return 1;
    }
    return 0;
}

/* method(time, callback, *rest, [context=context]), as aiowheel._loopcalls._hand_over. */
static PyObject *
hand_over(PyObject *method, PyObject *time, PyObject *const *args, Py_ssize_t nargs,
          PyObject *context)
{
    /* One slot more in front: PY_VECTORCALL_ARGUMENTS_OFFSET lets a bound method (the base's
     * call_at / call_later) put its self there instead of copying the arguments again. */
    PyObject *small[9];
    Py_ssize_t total = nargs + (context != NULL);
    PyObject **block = total <= 8 ? small : PyMem_Malloc((total + 1) * sizeof(PyObject *));
    if (block == NULL) {
        return PyErr_NoMemory();
    }
    PyObject **stack = block + 1;
    stack[0] = time;
    for (Py_ssize_t i = 1; i < nargs; i++) {
        stack[i] = args[i];
    }
    PyObject *res;
    if (context != NULL) {
        stack[nargs] = context;
        PyObject *names = PyTuple_Pack(1, g_str_context);
        res = names ? PyObject_Vectorcall(method, stack, nargs | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                          names)
                    : NULL;
        Py_XDECREF(names);
    }
    else {
        res = PyObject_Vectorcall(method, stack, nargs | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    }
    if (block != small) {
        PyMem_Free(block);
    }
    return res;
}

/* The context= keyword of call_at / call_later: 1 if the call fits the fast lane (and then
 * *context is the value, NULL for None or absent), 0 if the slow path must see it. */
static inline int
read_context(PyObject *kwnames, PyObject *const *args, Py_ssize_t nargs, PyObject **context)
{
    *context = NULL;
    if (kwnames == NULL) {
        return 1;
    }
    if (PyTuple_GET_SIZE(kwnames) != 1) {
        return 0;
    }
    PyObject *name = PyTuple_GET_ITEM(kwnames, 0);
    if (name != g_str_context && !(PyUnicode_Check(name) &&
                                   PyUnicode_Compare(name, g_str_context) == 0)) {
        return 0;
    }
    if (args[nargs] != Py_None) {
        *context = args[nargs];
    }
    return 1;
}

/* On a free-threaded build a call from a thread that is not the loop's takes the slow path,
 * where the engine takes the loop over (it is not running) or refuses, and files under its
 * take-over lock: filed here directly, a wheel's bucket queued before the armed wake-up would
 * call the engine's _arm from that thread, racing the loop's own (a lost wake-up). With the
 * GIL a foreign call is misuse that nothing checks outside debug mode, as asyncio's. */
static inline int
foreign_thread(CoreObject *c)
{
#ifdef Py_GIL_DISABLED
    return PyThread_get_thread_ident() != c->thread_id;
#else
    (void)c;
    return 0;
#endif
}

static PyObject *
core_call_at(CoreObject *c, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *context;
    double when, now;
    if (nargs < 2 || !c->fast || !read_context(kwnames, args, nargs, &context) ||
        !as_seconds(args[0], &when) || foreign_thread(c)) {
        goto slow;
    }
    if (core_now(c, &now) < 0) {
        return NULL;
    }
    double ahead = when - now;
    if (ahead >= c->threshold) {
        if (Py_TYPE(args[1])->tp_call == NULL) { /* PyCallable_Check, inline */
            goto slow;
        }
        PyObject *res = core_file_locked(c, when, args[1], args + 2, nargs - 2, context);
        if (res != Py_NotImplemented) {
            return res;
        }
        Py_DECREF(res); /* beyond the core's grid: the engine's wheel, through the slow path */
        goto slow;
    }
    if (ahead == ahead) { /* near, and not NaN: straight to the loop's heap */
        if (c->near_pad && ahead > 0) {
            PyObject *delay = PyFloat_FromDouble(ahead + c->near_pad);
            if (delay == NULL) {
                return NULL;
            }
            PyObject *res = hand_over(c->near_call_later, delay, args, nargs, context);
            Py_DECREF(delay);
            return res;
        }
        return hand_over(c->near_call_at, args[0], args, nargs, context);
    }
slow:
    if (c->slow_call_at == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "aiowheel: this core routes no loop's calls");
        return NULL;
    }
    return PyObject_Vectorcall(c->slow_call_at, args, nargsf, kwnames);
}

static PyObject *
core_call_later(CoreObject *c, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *context;
    double delay, now;
    if (nargs < 2 || !c->fast || !read_context(kwnames, args, nargs, &context) ||
        !as_seconds(args[0], &delay) || foreign_thread(c)) {
        goto slow;
    }
    if (delay >= c->threshold) {
        if (Py_TYPE(args[1])->tp_call == NULL) { /* PyCallable_Check, inline */
            goto slow;
        }
        PyObject *res;
        Py_BEGIN_CRITICAL_SECTION(c);
        res = core_now(c, &now) < 0 ? NULL
                                    : core_file(c, now + delay, args[1], args + 2, nargs - 2,
                                                context);
        Py_END_CRITICAL_SECTION();
        if (res != Py_NotImplemented) {
            return res;
        }
        Py_DECREF(res); /* beyond the core's grid: the engine's wheel, through the slow path */
        goto slow;
    }
    if (delay == delay) {
        if (c->near_call_later == NULL) {
            /* asyncio's call_later is call_at(self.time() + delay): here, without its Python
             * frame and without coming back through call_at (the near lane ran at 0.78x
             * asyncio's own through them; fast only outside debug mode, so there is no
             * source traceback to trim as asyncio's call_later does). */
            if (core_now(c, &now) < 0) {
                return NULL;
            }
            PyObject *when = PyFloat_FromDouble(now + delay + (delay > 0 ? c->near_pad : 0.0));
            if (when == NULL) {
                return NULL;
            }
            PyObject *res = hand_over(c->near_call_at, when, args, nargs, context);
            Py_DECREF(when);
            return res;
        }
        if (c->near_pad && delay > 0) {
            PyObject *padded = PyFloat_FromDouble(delay + c->near_pad);
            if (padded == NULL) {
                return NULL;
            }
            PyObject *res = hand_over(c->near_call_later, padded, args, nargs, context);
            Py_DECREF(padded);
            return res;
        }
        return hand_over(c->near_call_later, args[0], args, nargs, context);
    }
slow:
    if (c->slow_call_later == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "aiowheel: this core routes no loop's calls");
        return NULL;
    }
    return PyObject_Vectorcall(c->slow_call_later, args, nargsf, kwnames);
}

/* -- Core: the engine's side ----------------------------------------------------------------- */

static PyObject *
core_next_expiration(CoreObject *c, PyObject *Py_UNUSED(ignored))
{
    int64_t e = next_expiration(c);
    if (e == QUEUED_NONE) {
        Py_RETURN_NONE;
    }
    return PyLong_FromLongLong(e);
}

static PyObject *
handles_to_list(harray *a)
{
    PyObject *list = PyList_New(a->len);
    if (list == NULL) {
        for (Py_ssize_t i = 0; i < a->len; i++) {
            Py_DECREF(a->items[i]);
        }
        return NULL;
    }
    for (Py_ssize_t i = 0; i < a->len; i++) {
        PyList_SET_ITEM(list, i, (PyObject *)a->items[i]);
    }
    return list;
}

/* advance(now_tick, now, pass_floor, lateness) -> (due list | None, fired, first tick,
 * lateness): Engine._advance's loop over the wheel's due entries, for handles. */
static PyObject *
core_advance(CoreObject *c, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "advance(now_tick, now, pass_floor, lateness)");
        return NULL;
    }
    long long now_tick = PyLong_AsLongLong(args[0]);
    if (now_tick == -1 && PyErr_Occurred()) {
        return NULL;
    }
    double now = PyFloat_AsDouble(args[1]);
    double floor_ = PyFloat_AsDouble(args[2]);
    double lateness = PyFloat_AsDouble(args[3]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    if (now_tick < c->elapsed) {
        PyErr_Format(PyExc_ValueError, "time cannot go backwards: now=%lld < elapsed=%lld",
                     now_tick, (long long)c->elapsed);
        return NULL;
    }
    harray due = {NULL, 0, 0};
    if (wheel_advance(c, now_tick, &due) < 0) {
        PyObject *list = handles_to_list(&due); /* hand back what was found: fired below */
        Py_XDECREF(list);
        PyMem_Free(due.items);
        return NULL;
    }
    Py_ssize_t n = due.len;
    if (n > 1) {
        double last = -INFINITY;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (due.items[i]->when < last) {
                if (stable_sort(due.items, n, 1) < 0) {
                    goto fail;
                }
                break;
            }
            last = due.items[i]->when;
        }
    }
    Py_ssize_t fired = 0;
    int64_t first_tick = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i + PREFETCH_AHEAD < n) {
            prefetch_handle(due.items[i + PREFETCH_AHEAD]);
        }
        HandleObject *h = due.items[i];
        double when = h->when;
        if (when > now) {
            /* Not due after all (float rounding put it a hair early): file it again from its
             * exact deadline. */
            int64_t tick = tick_for(c, when);
            if (tick <= now_tick) {
                tick = now_tick + 1;
            }
            wheel_insert(c, h, tick < NEVER_TICK ? tick : NEVER_TICK - 1);
            continue;
        }
        if (!fired) {
            first_tick = h->tick;
        }
        if (now - when > lateness) {
            double late = when >= floor_ ? now - when : now - floor_;
            if (late > lateness) {
                lateness = late;
            }
        }
        h->tick = DISPATCHED;
        due.items[fired++] = h;
    }
    due.len = fired;
    PyObject *list;
    if (fired) {
        list = handles_to_list(&due);
        if (list == NULL) {
            PyMem_Free(due.items);
            return NULL;
        }
    }
    else {
        list = Py_NewRef(Py_None);
    }
    PyMem_Free(due.items);
    return Py_BuildValue("(NnLd)", list, fired, (long long)first_tick, lateness);
fail:
    for (Py_ssize_t i = 0; i < n; i++) { /* back in, due at the next pass */
        wheel_insert(c, due.items[i], c->elapsed);
    }
    PyMem_Free(due.items);
    return NULL;
}

/* run(batch): run a batch of due handles, in order, as one loop callback; on SystemExit or
 * KeyboardInterrupt the rest runs on the loop's next iteration (aiowheel._engine._run_ready).
 * Each handle that has run is replaced by None in the batch (the engine drops it after). */
static PyObject *
core_run(CoreObject *c, PyObject *batch)
{
    if (!PyList_CheckExact(batch)) {
        PyErr_SetString(PyExc_TypeError, "run() takes a list of handles");
        return NULL;
    }
    Py_INCREF(batch);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(batch); i++) {
        if (i + PREFETCH_AHEAD < PyList_GET_SIZE(batch)) {
            prefetch_handle(PyList_GET_ITEM(batch, i + PREFETCH_AHEAD));
        }
        PyObject *item = PyList_GET_ITEM(batch, i);
        if (Py_TYPE(item) != HandleType) {
            PyErr_SetString(PyExc_TypeError, "run() takes a list of handles");
            Py_DECREF(batch);
            return NULL;
        }
        Py_INCREF(item);
        int status = handle_run((HandleObject *)item);
        if (i < PyList_GET_SIZE(batch) && PyList_GET_ITEM(batch, i) == item) {
            /* Out of the batch as soon as it has run: a handle the batch held last is freed
             * here, while its cache lines are still in the cache (freed by the batch's own
             * dealloc after the last run, each of 50,000 due handles was read from memory a
             * second time). */
            PyList_SET_ITEM(batch, i, Py_NewRef(Py_None));
            Py_DECREF(item);
        }
        Py_DECREF(item);
        if (status < 0) {
            Py_ssize_t size = PyList_GET_SIZE(batch);
            if (i + 1 < size) {
#if PY_VERSION_HEX >= 0x030C0000
                PyObject *exc = PyErr_GetRaisedException();
#else
                PyObject *type, *exc, *tb;
                PyErr_Fetch(&type, &exc, &tb);
#endif
                PyObject *rest = PyList_GetSlice(batch, i + 1, size);
                PyObject *loop = rest ? PyObject_CallNoArgs(g_get_running_loop) : NULL;
                PyObject *again = loop ? PyObject_GetAttrString((PyObject *)c, "run") : NULL;
                PyObject *res =
                    again ? PyObject_CallMethodObjArgs(loop, g_str_call_soon, again, rest, NULL)
                          : NULL;
                Py_XDECREF(res);
                Py_XDECREF(again);
                Py_XDECREF(loop);
                Py_XDECREF(rest);
                PyErr_Clear();
#if PY_VERSION_HEX >= 0x030C0000
                PyErr_SetRaisedException(exc);
#else
                PyErr_Restore(type, exc, tb);
#endif
            }
            Py_DECREF(batch);
            return NULL;
        }
    }
    Py_DECREF(batch);
    Py_RETURN_NONE;
}

static PyObject *
core_entries(CoreObject *c, PyObject *Py_UNUSED(ignored))
{
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i <= c->nbuckets; i++) {
        link_t *bucket = i < c->nbuckets ? &c->buckets[i] : &c->never;
        for (link_t *l = bucket->next; l != bucket; l = l->next) {
            if (PyList_Append(out, (PyObject *)HANDLE_OF(l)) < 0) {
                Py_DECREF(out);
                return NULL;
            }
        }
    }
    return out;
}

static PyObject *
core_drain(CoreObject *c, PyObject *Py_UNUSED(ignored))
{
    harray out = {NULL, 0, 0};
    if (wheel_drain(c, &out) < 0) {
        PyObject *list = handles_to_list(&out);
        Py_XDECREF(list);
        PyMem_Free(out.items);
        return NULL;
    }
    PyObject *list = handles_to_list(&out);
    PyMem_Free(out.items);
    return list;
}

/* rebase(epoch): the engine's clock changed (aiowheel._engine.Engine._use_clock): every
 * pending handle is filed again by its deadline on the new epoch, in deadline order. */
static PyObject *
core_rebase(CoreObject *c, PyObject *arg)
{
    double epoch = PyFloat_AsDouble(arg);
    if (epoch == -1.0 && PyErr_Occurred()) {
        return NULL;
    }
    harray out = {NULL, 0, 0};
    if (wheel_drain(c, &out) < 0 || stable_sort(out.items, out.len, 1) < 0) {
        c->epoch = epoch;
        for (Py_ssize_t i = 0; i < out.len; i++) {
            wheel_insert(c, out.items[i], tick_for(c, out.items[i]->when));
        }
        PyMem_Free(out.items);
        return NULL;
    }
    c->epoch = epoch;
    for (Py_ssize_t i = 0; i < out.len; i++) {
        wheel_insert(c, out.items[i], tick_for(c, out.items[i]->when));
    }
    PyMem_Free(out.items);
    Py_RETURN_NONE;
}

static PyObject *
core_set_clock(CoreObject *c, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "set_clock(clock or None)");
        return NULL;
    }
    PyObject *clock = args[0] == Py_None ? NULL : args[0];
#ifndef __linux__
    if (clock == NULL) {
        PyErr_SetString(PyExc_ValueError, "no native clock on this platform");
        return NULL;
    }
#endif
    Py_XINCREF(clock);
    Py_XSETREF(c->clock, clock);
    Py_RETURN_NONE;
}

static PyObject *
core_set_armed(CoreObject *c, PyObject *arg)
{
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(arg, &overflow);
    if (v == -1 && PyErr_Occurred()) {
        return NULL;
    }
    c->armed = overflow > 0 ? INT64_MAX : overflow < 0 ? INT64_MIN : v;
    Py_RETURN_NONE;
}

static PyObject *
core_update(CoreObject *c, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "update(fast, debug, thread_id)");
        return NULL;
    }
    int fast = PyObject_IsTrue(args[0]);
    int debug = PyObject_IsTrue(args[1]);
    unsigned long thread_id = PyLong_AsUnsignedLongMask(args[2]);
    if (fast < 0 || debug < 0 || PyErr_Occurred()) {
        return NULL;
    }
    c->fast = fast && c->slow_call_at != NULL;
    c->debug = debug;
    c->thread_id = thread_id;
    Py_RETURN_NONE;
}

/* route(threshold, near_pad, near_call_at, near_call_later, slow_call_at, slow_call_later):
 * make call_at / call_later a loop-mode loop's (aiowheel._loopcalls.LoopCalls' routing). */
static PyObject *
core_route(CoreObject *c, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "route(threshold, near_pad, near_call_at, "
                                         "near_call_later, slow_call_at, slow_call_later)");
        return NULL;
    }
    double threshold = PyFloat_AsDouble(args[0]);
    double pad = PyFloat_AsDouble(args[1]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    c->threshold = threshold;
    c->near_pad = pad;
    Py_XSETREF(c->near_call_at, Py_NewRef(args[2]));
    /* None: the base's call_later is asyncio's, call_at(time() + delay), done here. */
    Py_XSETREF(c->near_call_later, args[3] == Py_None ? NULL : Py_NewRef(args[3]));
    Py_XSETREF(c->slow_call_at, Py_NewRef(args[4]));
    Py_XSETREF(c->slow_call_later, Py_NewRef(args[5]));
    Py_RETURN_NONE;
}

/* close(): drain (the handles, for the engine to abandon), and let go of the engine. */
static PyObject *
core_close(CoreObject *c, PyObject *Py_UNUSED(ignored))
{
    PyObject *list = core_drain(c, NULL);
    c->fast = 0;
    Py_CLEAR(c->arm);
    Py_CLEAR(c->claim); /* a closed engine's claim allows every cancel: no engine to ask */
    c->armed = INT64_MAX;
    return list;
}

static PyObject *
core_check(CoreObject *c, PyObject *Py_UNUSED(ignored))
{
    Py_ssize_t counted = 0;
    for (Py_ssize_t i = 0; i <= c->nbuckets; i++) {
        int is_never = i == c->nbuckets;
        link_t *bucket = is_never ? &c->never : &c->buckets[i];
        link_t *prev = bucket;
        for (link_t *l = bucket->next; l != bucket; l = l->next) {
            if (l == NULL) {
                return PyErr_Format(PyExc_AssertionError, "bucket %zd: chain broken", i);
            }
            if (l->prev != prev) {
                return PyErr_Format(PyExc_AssertionError, "bucket %zd: back link broken", i);
            }
            HandleObject *h = HANDLE_OF(l);
            if (h->core != c) {
                return PyErr_Format(PyExc_AssertionError, "bucket %zd: a handle of another core",
                                    i);
            }
            if (is_never) {
                if (h->tick < NEVER_TICK) {
                    return PyErr_Format(PyExc_AssertionError, "never-list holds tick %lld",
                                        (long long)h->tick);
                }
            }
            else {
                int64_t q = c->queued[i];
                if (q == QUEUED_NONE) {
                    return PyErr_Format(PyExc_AssertionError,
                                        "bucket %zd holds entries but is not queued", i);
                }
                if (q > h->tick && h->tick >= c->elapsed) {
                    return PyErr_Format(PyExc_AssertionError,
                                        "bucket %zd queued at %lld holds tick %lld", i,
                                        (long long)q, (long long)h->tick);
                }
                int found = 0;
                for (Py_ssize_t k = 0; k < c->heap_len; k++) {
                    if (c->heap[k].index == i && c->heap[k].expiration == q) {
                        found = 1;
                        break;
                    }
                }
                if (!found) {
                    return PyErr_Format(PyExc_AssertionError,
                                        "queued bucket %zd missing from the heap", i);
                }
            }
            prev = l;
            counted++;
        }
        if (bucket->prev != prev) {
            return PyErr_Format(PyExc_AssertionError, "bucket %zd: tail link broken", i);
        }
    }
    if (counted != c->count) {
        return PyErr_Format(PyExc_AssertionError, "count %zd but %zd handles linked", c->count,
                            counted);
    }
    if (c->heap_len > c->nbuckets) {
        return PyErr_Format(PyExc_AssertionError, "heap holds %zd items for %zd buckets",
                            c->heap_len, c->nbuckets);
    }
    Py_RETURN_NONE;
}

static PyObject *
core_queued_at(CoreObject *c, PyObject *arg)
{
    Py_ssize_t i = PyLong_AsSsize_t(arg);
    if (i < 0 || i >= c->nbuckets) {
        return PyErr_Format(PyExc_IndexError, "no bucket %zd", i);
    }
    return c->queued[i] == QUEUED_NONE ? Py_NewRef(Py_None) : PyLong_FromLongLong(c->queued[i]);
}

static Py_ssize_t
core_len(CoreObject *c)
{
    return c->count;
}

static PyObject *
core_get_removed(CoreObject *c, void *Py_UNUSED(closure))
{
    return PyLong_FromLongLong(c->removed);
}

static PyObject *
core_get_queued(CoreObject *c, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(c->heap_len);
}

static PyObject *
core_get_elapsed(CoreObject *c, void *Py_UNUSED(closure))
{
    return PyLong_FromLongLong(c->elapsed);
}

static PyObject *
core_get_fast(CoreObject *c, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(c->fast);
}

static PyObject *
core_get_native_clock(CoreObject *c, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(c->clock == NULL);
}

/* -- Core: life cycle ------------------------------------------------------------------------ */

/* Core(arm, tick, slots, epoch, clock): `arm` is the engine's re-arm, `clock` None for the
 * native CLOCK_MONOTONIC reading. */
static PyObject *
core_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *arm, *clock, *claim = Py_None;
    double tick, epoch;
    Py_ssize_t slots;
    static char *kwlist[] = {"arm", "tick", "slots", "epoch", "clock", "claim", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OdndO|$O:Core", kwlist, &arm, &tick, &slots,
                                     &epoch, &clock, &claim)) {
        return NULL;
    }
    if (slots < 2 || (slots & (slots - 1)) || slots > (1 << 20)) {
        return PyErr_Format(PyExc_ValueError,
                            "slots must be a power of two from 2 to 1048576 (2**20), got %zd",
                            slots);
    }
    if (!(tick > 0) || !isfinite(tick)) {
        return PyErr_Format(PyExc_ValueError, "tick must be positive and finite");
    }
#ifndef __linux__
    if (clock == Py_None) {
        PyErr_SetString(PyExc_ValueError, "no native clock on this platform");
        return NULL;
    }
#endif
    CoreObject *c = (CoreObject *)type->tp_alloc(type, 0);
    if (c == NULL) {
        return NULL;
    }
    int bits = 0;
    while (((Py_ssize_t)1 << bits) < slots) {
        bits++;
    }
    int levels = (64 + bits - 1) / bits;
    c->bits = bits;
    c->levels = levels;
    c->mask = slots - 1;
    c->nbuckets = (Py_ssize_t)levels * slots;
    c->buckets = PyMem_Malloc(c->nbuckets * sizeof(link_t));
    c->queued = PyMem_Malloc(c->nbuckets * sizeof(int64_t));
    if (c->buckets == NULL || c->queued == NULL) {
        Py_DECREF(c);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < c->nbuckets; i++) {
        c->buckets[i].prev = c->buckets[i].next = &c->buckets[i];
        c->queued[i] = QUEUED_NONE;
    }
    c->never.prev = c->never.next = &c->never;
    for (int n = 0; n < (int)sizeof(c->level_of); n++) {
        int level = (n > 0 ? n - 1 : 0) / bits;
        c->level_of[n] = (unsigned char)(level < levels ? level : levels - 1);
    }
    c->epoch = epoch;
    c->inv_tick = 1.0 / tick;
    c->clock = clock == Py_None ? NULL : Py_NewRef(clock);
    c->armed = INT64_MAX;
    c->arm = Py_NewRef(arm);
    c->claim = claim == Py_None ? NULL : Py_NewRef(claim);
    c->threshold = INFINITY;
    return (PyObject *)c;
}

static int
core_traverse(CoreObject *c, visitproc visit, void *arg)
{
    Py_VISIT(c->clock);
    Py_VISIT(c->arm);
    Py_VISIT(c->claim);
    Py_VISIT(c->near_call_at);
    Py_VISIT(c->near_call_later);
    Py_VISIT(c->slow_call_at);
    Py_VISIT(c->slow_call_later);
    if (c->buckets != NULL) {
        /* The pending handles are not tracked: what they hold is reported as the Core's. */
        for (Py_ssize_t i = 0; i <= c->nbuckets; i++) {
            link_t *bucket = i < c->nbuckets ? &c->buckets[i] : &c->never;
            for (link_t *l = bucket->next; l != bucket; l = l->next) {
                HandleObject *h = HANDLE_OF(l);
                Py_VISIT(h->callback);
                Py_VISIT(h->args);
                Py_VISIT(h->context);
#ifdef Py_GIL_DISABLED
                Py_VISIT(h->core); /* the Core itself: a pending handle's reference is its own */
#endif
            }
        }
    }
    return 0;
}

static int
core_clear(CoreObject *c)
{
    if (c->buckets != NULL) {
        /* Drain: each pending handle reads cancelled, lets go of what it holds and of the
         * wheel's reference to it. */
        for (Py_ssize_t i = 0; i <= c->nbuckets; i++) {
            link_t *bucket = i < c->nbuckets ? &c->buckets[i] : &c->never;
            link_t *l = bucket->next;
            while (l != bucket) {
                link_t *next = l->next;
                HandleObject *h = HANDLE_OF(l);
                l->prev = l->next = NULL;
                h->tick = CANCELLED;
                Py_CLEAR(h->callback);
                Py_CLEAR(h->args);
                Py_CLEAR(h->context);
                Py_DECREF(h);
                l = next;
            }
            bucket->next = bucket->prev = bucket;
            if (i < c->nbuckets) {
                c->queued[i] = QUEUED_NONE;
            }
        }
        c->heap_len = 0;
        c->count = 0;
    }
    c->fast = 0;
    Py_CLEAR(c->clock);
    Py_CLEAR(c->arm);
    Py_CLEAR(c->claim);
    Py_CLEAR(c->near_call_at);
    Py_CLEAR(c->near_call_later);
    Py_CLEAR(c->slow_call_at);
    Py_CLEAR(c->slow_call_later);
    return 0;
}

static void
core_dealloc(CoreObject *c)
{
    PyObject_GC_UnTrack(c);
    core_clear(c);
    PyMem_Free(c->buckets);
    PyMem_Free(c->queued);
    PyMem_Free(c->heap);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

/* The engine's side of the Core, each under the Core's critical section (see the top). */
#define LOCKED_O(name)                                                   \
    static PyObject *name##_locked(CoreObject *c, PyObject *arg)         \
    {                                                                    \
        PyObject *res;                                                   \
        Py_BEGIN_CRITICAL_SECTION(c);                                    \
        res = name(c, arg);                                              \
        Py_END_CRITICAL_SECTION();                                       \
        return res;                                                      \
    }
#define LOCKED_FAST(name)                                                                     \
    static PyObject *name##_locked(CoreObject *c, PyObject *const *args, Py_ssize_t nargs)   \
    {                                                                                         \
        PyObject *res;                                                                        \
        Py_BEGIN_CRITICAL_SECTION(c);                                                         \
        res = name(c, args, nargs);                                                           \
        Py_END_CRITICAL_SECTION();                                                            \
        return res;                                                                           \
    }
LOCKED_O(core_next_expiration)
LOCKED_FAST(core_advance)
LOCKED_O(core_entries)
LOCKED_O(core_drain)
LOCKED_O(core_close)
LOCKED_O(core_rebase)
LOCKED_FAST(core_set_clock)
LOCKED_O(core_set_armed)
LOCKED_FAST(core_update)
LOCKED_FAST(core_route)
LOCKED_O(core_check)
LOCKED_O(core_queued_at)

static PyMethodDef core_methods[] = {
    {"call_at", (PyCFunction)(void (*)(void))core_call_at, METH_FASTCALL | METH_KEYWORDS,
     "call_at($self, when, callback, *args, context=None)\n--\n\n"
     "A loop-mode loop's ``call_at``: the wheel, the loop's heap or the slow path."},
    {"call_later", (PyCFunction)(void (*)(void))core_call_later, METH_FASTCALL | METH_KEYWORDS,
     "call_later($self, delay, callback, *args, context=None)\n--\n\n"
     "A loop-mode loop's ``call_later`` (see call_at)."},
    {"file", (PyCFunction)(void (*)(void))core_file_method, METH_FASTCALL,
     "file($self, when, callback, args, context, /)\n--\n\nFile callback(*args) for when."},
    {"next_expiration", (PyCFunction)core_next_expiration_locked, METH_NOARGS, NULL},
    {"advance", (PyCFunction)(void (*)(void))core_advance_locked, METH_FASTCALL, NULL},
    {"run", (PyCFunction)core_run, METH_O, NULL},
    {"entries", (PyCFunction)core_entries_locked, METH_NOARGS, NULL},
    {"drain", (PyCFunction)core_drain_locked, METH_NOARGS, NULL},
    {"close", (PyCFunction)core_close_locked, METH_NOARGS, NULL},
    {"rebase", (PyCFunction)core_rebase_locked, METH_O, NULL},
    {"set_clock", (PyCFunction)(void (*)(void))core_set_clock_locked, METH_FASTCALL, NULL},
    {"set_armed", (PyCFunction)core_set_armed_locked, METH_O, NULL},
    {"update", (PyCFunction)(void (*)(void))core_update_locked, METH_FASTCALL, NULL},
    {"route", (PyCFunction)(void (*)(void))core_route_locked, METH_FASTCALL, NULL},
    {"check", (PyCFunction)core_check_locked, METH_NOARGS, NULL},
    {"queued_at", (PyCFunction)core_queued_at_locked, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef core_getset[] = {
    {"removed", (getter)core_get_removed, NULL, NULL, NULL},
    {"queued", (getter)core_get_queued, NULL, NULL, NULL},
    {"elapsed", (getter)core_get_elapsed, NULL, NULL, NULL},
    {"fast", (getter)core_get_fast, NULL, NULL, NULL},
    {"native_clock", (getter)core_get_native_clock, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods core_as_sequence = {
    .sq_length = (lenfunc)core_len,
};

static PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "aiowheel._core.Core",
    .tp_basicsize = sizeof(CoreObject),
    .tp_dealloc = (destructor)core_dealloc,
    .tp_as_sequence = &core_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "An engine's wheel of callback handles (see the module source).",
    .tp_traverse = (traverseproc)core_traverse,
    .tp_clear = (inquiry)core_clear,
    .tp_methods = core_methods,
    .tp_getset = core_getset,
    .tp_new = core_new,
};

/* -- DONE: an awaitable already finished -------------------------------------------------------
 *
 * ``await DONE`` is None at once: its __await__ is itself, an iterator already exhausted, so the
 * interpreter's SEND gets NULL with no exception set, which reads as "returned None" (no
 * StopIteration is made, nothing is allocated). Timeout.__aexit__ returns it (see
 * aiowheel._awaiting). Stateless, so one instance serves every await at once, on any thread. */

typedef struct {
    PyObject_HEAD
} DoneObject;

static PyObject *
done_next(PyObject *Py_UNUSED(self))
{
    return NULL; /* exhausted: "return None" */
}

static PyObject *
done_send(PyObject *Py_UNUSED(self), PyObject *Py_UNUSED(value))
{
    PyErr_SetNone(PyExc_StopIteration);
    return NULL;
}

static PyObject *
done_throw(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1) {
        PyErr_SetString(PyExc_TypeError, "throw expected at least 1 argument");
        return NULL;
    }
    PyObject *exc = args[0];
    if (PyExceptionClass_Check(exc)) {
        PyErr_SetObject(exc, nargs > 1 ? args[1] : NULL);
    }
    else {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    }
    return NULL;
}

static PyObject *
done_close(PyObject *Py_UNUSED(self), PyObject *Py_UNUSED(ignored))
{
    Py_RETURN_NONE;
}

static PyObject *
done_repr(PyObject *Py_UNUSED(self))
{
    return PyUnicode_FromString("aiowheel.DONE");
}

static PyMethodDef done_methods[] = {
    {"send", (PyCFunction)done_send, METH_O, NULL},
    {"throw", (PyCFunction)(void (*)(void))done_throw, METH_FASTCALL, NULL},
    {"close", (PyCFunction)done_close, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyAsyncMethods done_as_async = {
    .am_await = PyObject_SelfIter,
};

static PyTypeObject DoneType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "aiowheel._core.Done",
    .tp_basicsize = sizeof(DoneObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An awaitable already finished: ``await DONE`` is None at once.",
    .tp_repr = done_repr,
    .tp_as_async = &done_as_async,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = done_next,
    .tp_methods = done_methods,
};

/* -- loop_setattr: a loop-mode class's __setattr__ -------------------------------------------
 *
 * A loop-mode loop watches one attribute name: ``time`` replaced on the instance (a test's
 * fake clock) moves the engine and the base heap onto it (aiowheel._loop's _follow_time). As a
 * Python __setattr__ that was a frame and a super() lookup on every attribute the base loop
 * sets, and asyncio sets one on every cancel of a handle on its heap (_timer_cancelled_count):
 * loop mode's near timers ran at 0.89x asyncio's own for it. This is the same method in C: a
 * method descriptor (so the class's slot calls it with the instance, without a frame) doing
 * object.__setattr__ and calling the watcher for ``time`` only. Used where the base loop's own
 * __setattr__ is object's (asyncio, uvloop, rloop and zuvloop's). */

static PyObject *g_time_replaced = NULL; /* aiowheel._loop._time_replaced */

static PyObject *
loop_setattr(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "expected 2 arguments, got %zd", nargs);
        return NULL;
    }
    PyObject *name = args[0];
    if (PyObject_GenericSetAttr(self, name, args[1]) < 0) {
        return NULL;
    }
    if (g_time_replaced != NULL && PyUnicode_Check(name) &&
        PyUnicode_CompareWithASCIIString(name, "time") == 0) {
        return PyObject_CallOneArg(g_time_replaced, self);
    }
    Py_RETURN_NONE;
}

static PyMethodDef loop_setattr_def = {
    "__setattr__", (PyCFunction)(void (*)(void))loop_setattr, METH_FASTCALL,
    "Implement setattr(self, name, value); a replaced ``time`` moves the wheel onto it."};

static PyObject *
watch_time(PyObject *Py_UNUSED(module), PyObject *callback)
{
    Py_XSETREF(g_time_replaced, Py_NewRef(callback));
    Py_RETURN_NONE;
}

/* -- the module ------------------------------------------------------------------------------ */

static PyObject *
setup(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "setup(callback_repr, empty_context, get_running_loop)");
        return NULL;
    }
    Py_XSETREF(g_callback_repr, Py_NewRef(args[0]));
    Py_XSETREF(g_empty_context, Py_NewRef(args[1]));
    Py_XSETREF(g_get_running_loop, Py_NewRef(args[2]));
    Py_RETURN_NONE;
}

static PyObject *
freelist_size(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromLong(freelist_len);
}

static PyMethodDef module_methods[] = {
    {"setup", (PyCFunction)(void (*)(void))setup, METH_FASTCALL, NULL},
    {"freelist_size", (PyCFunction)freelist_size, METH_NOARGS, NULL},
    {"watch_time", (PyCFunction)watch_time, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "aiowheel._core",
    .m_doc = "The native core of aiowheel's compiled build (see aiowheel/_core.c).",
    .m_size = -1,
    .m_methods = module_methods,
};

/* Where asyncio.TimerHandle keeps the slot `name`, or -1. */
static Py_ssize_t
slot_offset(PyObject *type, const char *name)
{
    PyObject *descr = PyObject_GetAttrString(type, name);
    Py_ssize_t offset = -1;
    if (descr != NULL && Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
        offset = ((PyMemberDescrObject *)descr)->d_member->offset;
    }
    Py_XDECREF(descr);
    return offset;
}

PyMODINIT_FUNC
PyInit__core(void)
{
    if (HandleType == NULL) {
        PyObject *asyncio = PyImport_ImportModule("asyncio");
        PyObject *base = asyncio == NULL ? NULL : PyObject_GetAttrString(asyncio, "TimerHandle");
        Py_XDECREF(asyncio);
        if (base == NULL) {
            return NULL;
        }
        if (!PyType_Check(base) ||
            ((PyTypeObject *)base)->tp_basicsize != (Py_ssize_t)sizeof(HandleObject) ||
#if PY_VERSION_HEX < 0x030C0000
            ((PyTypeObject *)base)->tp_weaklistoffset != offsetof(HandleObject, weakreflist) ||
#endif
            slot_offset(base, "_args") != offsetof(HandleObject, args) ||
            slot_offset(base, "_callback") != offsetof(HandleObject, callback) ||
            slot_offset(base, "_cancelled") != offsetof(HandleObject, tick) ||
            slot_offset(base, "_context") != offsetof(HandleObject, context) ||
            slot_offset(base, "_loop") != offsetof(HandleObject, link.prev) ||
            slot_offset(base, "_repr") != offsetof(HandleObject, link.next) ||
            slot_offset(base, "_source_traceback") != offsetof(HandleObject, when) ||
            slot_offset(base, "_scheduled") != offsetof(HandleObject, core) ||
            slot_offset(base, "_when") != offsetof(HandleObject, spare)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ImportError,
                         "aiowheel._core: asyncio.TimerHandle's layout is not the one this core "
                         "was written for (%zd bytes)",
                         PyType_Check(base) ? ((PyTypeObject *)base)->tp_basicsize : -1);
            Py_DECREF(base);
            return NULL;
        }
        HandleType = (PyTypeObject *)PyType_FromSpecWithBases(&handle_spec, base);
        Py_DECREF(base);
        if (HandleType == NULL) {
            return NULL;
        }
    }
    if (PyType_Ready(&CoreType) < 0 || PyType_Ready(&DoneType) < 0) {
        return NULL;
    }
    g_str_context = PyUnicode_InternFromString("context");
    g_str_call_exception_handler = PyUnicode_InternFromString("call_exception_handler");
    g_str_call_soon = PyUnicode_InternFromString("call_soon");
    g_empty_tuple = PyTuple_New(0);
    if (!g_str_context || !g_str_call_exception_handler || !g_str_call_soon || !g_empty_tuple) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&core_module);
    if (m == NULL) {
        return NULL;
    }
#ifdef Py_GIL_DISABLED
    if (PyUnstable_Module_SetGIL(m, Py_MOD_GIL_NOT_USED) < 0) { /* see the top */
        Py_DECREF(m);
        return NULL;
    }
#endif
    PyObject *setattr_descr = PyDescr_NewMethod(&PyBaseObject_Type, &loop_setattr_def);
    int set = setattr_descr == NULL ? -1 : PyModule_AddObjectRef(m, "loop_setattr", setattr_descr);
    Py_XDECREF(setattr_descr);
    if (set < 0) {
        Py_DECREF(m);
        return NULL;
    }
    PyObject *done = PyType_GenericAlloc(&DoneType, 0);
    int added = done == NULL ? -1 : PyModule_AddObjectRef(m, "DONE", done);
    Py_XDECREF(done);
    if (added < 0) {
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddObjectRef(m, "TimerHandle", (PyObject *)HandleType) < 0 ||
        PyModule_AddObjectRef(m, "Core", (PyObject *)&CoreType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
