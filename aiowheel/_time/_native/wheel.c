/* aiowheel/_time/_native/wheel.c: the Core's hierarchical timing wheel of handles.
 *
 * Mirrors aiowheel/_time/_wheel.py, whose docstring is the theory of operation: fixed levels of
 * `slots` buckets, placement by distance (Kafka's rule) with a one-bucket placement cache, one
 * heap item per non-empty bucket under its expiration (`queued` remembers it), the cascade
 * with its re-file into level 0 inlined, due entries handed back in tick order, "never" kept
 * in a list apart. tests/time/test_native.py feeds both the same random operations and compares
 * what they do. Where it differs, on purpose:
 *
 * - Ticks are int64, where _wheel.py takes any Python int. The levels span 64 bits, which
 *   holds every tick the Core files, so there is no far-deadline ring (_wheel.py's
 *   _insert_far): a finite deadline past the grid never reaches this file (core_file answers
 *   NotImplemented and the driver's own wheel files it). "Never" is its own NEVER_TICK, 2**62
 *   (_wheel.NEVER is 2**1024), and ticks before the grid are clamped to PAST_TICK (clock.c).
 * - A bucket queued under nothing reads QUEUED_NONE (INT64_MAX; _wheel.py uses NEVER), and a
 *   heap item is an (expiration, index) pair, where _wheel.py packs both into one int.
 * - Only what handles need: insert and unlink, without _wheel.py's checked add / remove /
 *   move. A handle's deadline never changes, so there is no lazy re-file either. The count is
 *   kept per entry, not per advance.
 * - Due handles go straight to the due pass (due_take), which sorts them by deadline and
 *   stamp (sort_keyed, a natural merge sort of (deadline, stamp, handle) triples), where
 *   _wheel.py hands back entries in tick order (list.sort) and the driver then sorts by
 *   deadline: the same final order, in one sort, without a cache miss per comparison.
 * - Out of memory while advancing (the due array cannot grow), the entries not yet handed back
 *   go into the elapsed tick's bucket (due at the next advance): nothing is lost.
 * - The heap of bucket expirations never grows: it is allocated for every bucket when the
 *   Core is made (heap_alloc), so queuing a bucket cannot fail, and no insert, cascade or
 *   advance has a memory error to undo (before, a heap that could not grow left a bucket
 *   unqueued: a cascade's timer ran a level's turn late, and a call_later that raised
 *   MemoryError had filed its handle all the same). The bound: the heap holds one item per
 *   queued bucket. An item is pushed only for an expiration earlier than the bucket's queued
 *   one, and never is while the bucket is queued: a bucket of level L is queued at the one
 *   expiration of its slot within the level's window from `elapsed` (2**(bits*(L+1)) ticks),
 *   which an advance only moves past expirations it has popped. So no item goes stale (Core.
 *   check asserts it: each item is its bucket's queued expiration) and heap_len <= nbuckets =
 *   levels x slots. Reserving instead, before anything is linked, needs as much at worst (one
 *   cascade of a top-level bucket can queue every bucket of the levels below), and would keep
 *   a failure path in every filing and every advance. The cost: 16 bytes a bucket, beside the
 *   24 (a list head and a queued expiration) every bucket has already; 11 KiB for the default
 *   64 slots (704 buckets), 64 MiB virtual for the most, 2**20 slots (4 Mi buckets, 96 MiB
 *   already), of which only the pages the heap reaches are ever touched (an allocation that
 *   large is mapped, not written: measured, a Core of 2**20 slots grows resident memory by the
 *   buckets' 96 MiB alone). Should an item go stale all the same, heap_queue rebuilds the heap
 *   from `queued` rather than grow it.
 *
 * Everything here runs under the Core's critical section, which its callers take.
 */

/* -- the heap of bucket expirations -------------------------------------------------------- */

static inline int
item_less(heapitem a, heapitem b)
{
    return a.expiration < b.expiration || (a.expiration == b.expiration && a.index < b.index);
}

/* A Core's heap, for every bucket (see the top); -1 with MemoryError if it cannot be had. The
 * test hook's countdown (core.h) is read here, where the heap is allocated, and nowhere else. */
static int
heap_alloc(CoreObject *c)
{
    if (heap_fail_after && --heap_fail_after == 0) {
        PyErr_NoMemory();
        return -1;
    }
    c->heap = PyMem_Malloc((size_t)c->nbuckets * sizeof(heapitem));
    if (c->heap == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    c->heap_cap = c->nbuckets;
    c->heap_len = 0;
    return 0;
}

static void
heap_sift_up(CoreObject *c, Py_ssize_t pos, heapitem item)
{
    while (pos > 0) {
        Py_ssize_t parent = (pos - 1) >> 1;
        if (!item_less(item, c->heap[parent])) {
            break;
        }
        c->heap[pos] = c->heap[parent];
        pos = parent;
    }
    c->heap[pos] = item;
}

/* The heap made again from `queued`: an item for each queued bucket. Never needed while no
 * item goes stale (see the top); it keeps heap_queue from needing more room if one did. */
static void
heap_rebuild(CoreObject *c)
{
    c->heap_len = 0;
    for (Py_ssize_t i = 0; i < c->nbuckets; i++) {
        if (c->queued[i] != QUEUED_NONE) {
            heapitem item = {c->queued[i], i};
            heap_sift_up(c, c->heap_len++, item);
        }
    }
}

/* Bucket `index` queued at `expiration` (earlier than its queued one): cannot fail, the heap
 * has room for every bucket. */
static void
heap_queue(CoreObject *c, Py_ssize_t index, int64_t expiration)
{
    c->queued[index] = expiration;
    if (c->heap_len == c->heap_cap) {
        heap_rebuild(c); /* a stale item took a bucket's room: dropped (the new one included) */
        return;
    }
    heapitem item = {expiration, index};
    heap_sift_up(c, c->heap_len++, item);
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

/* -- the buckets ---------------------------------------------------------------------------- */

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

/* Wheel.insert: the handle's reference is the wheel's from now on. Returns the expiration its
 * bucket was queued at, or UNQUEUED if it was queued already; cannot fail (see the top). */
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
        heap_queue(c, index, expiration);
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

/* Sorting handles by deadline, then filing stamp (handles of one deadline in the order they
 * were filed, whatever buckets they came through: one filed far ahead cascades into a bucket
 * after one filed later, nearer). The sort orders (deadline, stamp, handle) triples: its
 * comparisons read a contiguous array, not each handle's fields (a due batch's handles are
 * scattered in memory, and reading the key from each would cost a cache miss per handle per
 * merge pass). */

static inline int
keyed_after(const keyed *a, const keyed *b)
{
    return b->when < a->when || (b->when == a->when && b->seq < a->seq); /* b goes first */
}

static void
merge_runs(const keyed *src, keyed *dst, Py_ssize_t lo, Py_ssize_t mid, Py_ssize_t hi)
{
    /* A branch per element, not a conditional move: the runs of a due batch interleave in a
     * regular pattern (timers filed in rounds over the same deadlines), which the branch
     * predictor learns; a branch-free merge made each step wait for the last (4x slower on
     * the due bench's batch, 50 runs of 1,000 deadlines). */
    const keyed *l = src + lo, *lend = src + mid, *r = src + mid, *rend = src + hi;
    keyed *out = dst + lo;
    while (l < lend && r < rend) {
        if (keyed_after(l, r)) {
            *out++ = *r++;
        }
        else {
            *out++ = *l++; /* equal keys: the left run first (stable) */
        }
    }
    memcpy(out, l, (size_t)(lend - l) * sizeof(keyed));
    out += lend - l;
    memcpy(out, r, (size_t)(rend - r) * sizeof(keyed));
}

static int
karray_reserve(karray *a, Py_ssize_t more)
{
    if (a->len + more > a->cap) {
        Py_ssize_t cap = a->cap ? a->cap : 64;
        while (cap < a->len + more) {
            cap *= 2;
        }
        keyed *items = PyMem_Realloc(a->items, (size_t)cap * sizeof(keyed));
        if (items == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        a->items = items;
        a->cap = cap;
    }
    return 0;
}

/* A natural merge sort of `a`: the ascending runs found in one pass, then merged pairwise,
 * each pass from one array into the other (`tmp`, grown to n if a merge is needed). A due batch
 * is mostly in order already (timers filed with one delay come in deadline order), so it takes
 * log2(runs) passes, where a plain bottom-up merge sort takes log2(n). Returns the array that
 * holds the result (`a` or tmp's), or NULL on a memory error (`a` then unchanged). */
static keyed *
sort_keyed(keyed *a, Py_ssize_t n, karray *tmp)
{
    Py_ssize_t nruns = 1;
    for (Py_ssize_t i = 1; i < n; i++) {
        nruns += keyed_after(&a[i - 1], &a[i]);
    }
    if (nruns == 1) {
        return a;
    }
    tmp->len = 0;
    if (karray_reserve(tmp, n) < 0) {
        return NULL;
    }
    Py_ssize_t *runs = PyMem_Malloc((size_t)(nruns + 1) * sizeof(Py_ssize_t));
    if (runs == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    Py_ssize_t r = 0;
    runs[r++] = 0;
    for (Py_ssize_t i = 1; i < n; i++) {
        if (keyed_after(&a[i - 1], &a[i])) {
            runs[r++] = i; /* a[i] goes before its predecessor: a new run */
        }
    }
    runs[nruns] = n;
    keyed *src = a, *dst = tmp->items;
    while (nruns > 1) {
        Py_ssize_t merged = 0;
        for (r = 0; r + 1 < nruns; r += 2) {
            merge_runs(src, dst, runs[r], runs[r + 1], runs[r + 2]);
            runs[merged++] = runs[r];
        }
        if (r < nruns) { /* an odd run out: merged on the next pass */
            memcpy(dst + runs[r], src + runs[r], (size_t)(n - runs[r]) * sizeof(keyed));
            runs[merged++] = runs[r];
        }
        runs[merged] = n;
        nruns = merged;
        keyed *swap = src;
        src = dst;
        dst = swap;
    }
    PyMem_Free(runs);
    return src;
}

/* Handles in place by deadline then stamp (a drain filed again on a new clock). */
static int
stable_sort(HandleObject **items, Py_ssize_t n)
{
    if (n < 2) {
        return 0;
    }
    karray a = {NULL, 0, 0}, tmp = {NULL, 0, 0};
    if (karray_reserve(&a, n) < 0) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        a.items[i].when = items[i]->when;
        a.items[i].seq = items[i]->seq;
        a.items[i].h = items[i];
    }
    keyed *sorted = sort_keyed(a.items, n, &tmp);
    if (sorted != NULL) {
        for (Py_ssize_t i = 0; i < n; i++) {
            items[i] = sorted[i].h;
        }
    }
    PyMem_Free(tmp.items);
    PyMem_Free(a.items);
    return sorted == NULL ? -1 : 0;
}

/* What an advance hands back (due.c's core_advance reads it): the due handles with their
 * deadlines and stamps, in chain order, and those found a hair early (float rounding) to
 * file again. The walk marks each due handle DISPATCHED and reads all it needs of it as it
 * meets it, so nothing touches a handle again before the batch runs. */
typedef struct {
    karray due;        /* in the order of their chains */
    harray early;      /* not due after all: filed again after the walk */
    double now;        /* the clock's reading: due if when <= now */
    double floor_;     /* the pass floor (lateness is measured from it for a deadline before) */
    double lateness;   /* the largest so far (in: the driver's; out: with this batch's) */
    keyed first;       /* the first in (deadline, stamp) order */
    int64_t first_tick; /* and its tick */
} duepass;

/* A due handle into the pass, marked DISPATCHED (or, found a hair early, into `early`). */
static int
due_take(duepass *p, HandleObject *h)
{
    double when = h->when;
    if (when > p->now) {
        return harray_append(&p->early, h);
    }
    if (karray_reserve(&p->due, 1) < 0) {
        return -1;
    }
    keyed *k = &p->due.items[p->due.len++];
    k->when = when;
    k->seq = h->seq;
    k->h = h;
    if (p->first.h == NULL || keyed_after(&p->first, k)) {
        p->first = *k; /* the first in deadline order: the smallest (deadline, stamp) met */
        p->first_tick = h->tick;
    }
    if (p->now - when > p->lateness) {
        double late = when >= p->floor_ ? p->now - when : p->now - p->floor_;
        if (late > p->lateness) {
            p->lateness = late;
        }
    }
    h->tick = DISPATCHED;
    return 0;
}

/* A handle of a walked chain (still counted) into the elapsed tick's bucket: due at the next
 * advance. */
static void
link_elapsed(CoreObject *c, link_t *l)
{
    Py_ssize_t at = (Py_ssize_t)(c->elapsed & c->mask);
    link_tail(&c->buckets[at], l);
    if (c->elapsed < c->queued[at]) {
        heap_queue(c, at, c->elapsed);
    }
}

/* A walked chain's handle that is not due by `now`: into its level-0 bucket, or filed again
 * (a cascade). */
static void
walk_later(CoreObject *c, HandleObject *h, int64_t level0_end)
{
    int64_t tick = h->tick;
    link_t *l = &h->link;
    if (tick < level0_end) {
        Py_ssize_t at = (Py_ssize_t)(tick & c->mask);
        link_tail(&c->buckets[at], l);
        if (tick < c->queued[at]) {
            heap_queue(c, at, tick);
        }
    }
    else {
        l->prev = l->next = NULL;
        c->count--;
        wheel_insert(c, h, tick);
    }
}

/* Wheel.advance: every handle whose tick is <= now, into the pass `p` (due_take), in the
 * order of their chains; the pass sorts them by deadline. Each chain is walked once, from its
 * head (a chain's handles lie in filing order; a walk from both ends at once, to overlap two
 * chains of memory waits, measured slower: the forward walk is what the hardware prefetches). */
static int
wheel_advance(CoreObject *c, int64_t now, duepass *p)
{
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
            if (h->tick > now) {
                walk_later(c, h, level0_end);
            }
            else {
                l->prev = l->next = NULL;
                if (due_take(p, h) < 0) {
                    /* Back into the elapsed tick's bucket, and the rest of the chain likewise:
                     * due at the next advance. */
                    for (;;) {
                        link_elapsed(c, l);
                        if ((l = next) == NULL) {
                            return -1;
                        }
                        next = l->next;
                    }
                }
                c->count--;
            }
            l = next;
        }
    }
    set_elapsed(c, now);
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

/* -- checks (tests/time/test_native.py) ---------------------------------------------------------- */

/* Wheel.check: every invariant of the buckets and the heap; AssertionError names the first one
 * broken. */
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
    for (Py_ssize_t k = 0; k < c->heap_len; k++) {
        heapitem item = c->heap[k];
        if (c->queued[item.index] != item.expiration) {
            return PyErr_Format(PyExc_AssertionError,
                                "heap item %zd: bucket %zd at %lld, queued at %lld", k,
                                item.index, (long long)item.expiration,
                                (long long)c->queued[item.index]);
        }
        if (k && item_less(item, c->heap[(k - 1) >> 1])) {
            return PyErr_Format(PyExc_AssertionError, "heap item %zd before its parent", k);
        }
    }
    Py_RETURN_NONE;
}

/* earliest(expiration): the earliest deadline among the handles of the buckets queued under
 * `expiration` (inf if none): aiowheel._time._wheel's Wheel.entries_at and aiowheel._time._store's
 * Store.earliest, for an exact clock's wake-up. One bucket per level can be queued under it. */
static PyObject *
core_earliest(CoreObject *c, PyObject *arg)
{
    long long expiration = PyLong_AsLongLong(arg);
    if (expiration == -1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
            return NULL;
        }
        PyErr_Clear(); /* beyond the core's grid: no handle of its is there */
        return PyFloat_FromDouble(INFINITY);
    }
    double earliest = INFINITY;
    for (int level = 0; level < c->levels; level++) {
        int shift = level * c->bits;
        if (shift >= 63) {
            break;
        }
        Py_ssize_t index = ((Py_ssize_t)level << c->bits) + (Py_ssize_t)((expiration >> shift) & c->mask);
        if (c->queued[index] != expiration) {
            continue;
        }
        link_t *bucket = &c->buckets[index];
        for (link_t *l = bucket->next; l != bucket; l = l->next) {
            double when = HANDLE_OF(l)->when;
            if (when < earliest) {
                earliest = when;
            }
        }
    }
    return PyFloat_FromDouble(earliest);
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
