/* aiowheel/_native/wheel.c: the Core's hierarchical timing wheel of handles.
 *
 * Mirrors aiowheel/_wheel.py, whose docstring is the theory of operation: fixed levels of
 * `slots` buckets, placement by distance (Kafka's rule) with a one-bucket placement cache, one
 * heap item per non-empty bucket under its expiration (`queued` remembers it), the cascade
 * with its re-file into level 0 inlined, due entries handed back in tick order, "never" kept
 * in a list apart. tests/test_native.py feeds both the same random operations and compares
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
 * - Due entries out of tick order are sorted by stable_sort (a natural merge sort of (key,
 *   handle) pairs, below), where _wheel.py calls list.sort: the same stable order, without a
 *   cache miss per comparison. due.c sorts by deadline with it too.
 * - Out of memory while advancing, the entries not yet handed back go into the elapsed tick's
 *   bucket (due at the next advance): nothing is lost.
 *
 * Everything here runs under the Core's critical section, which its callers take.
 */

/* -- the heap of bucket expirations -------------------------------------------------------- */

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

/* Stable merge sort of handles by tick (by_when == 0) or by deadline then filing stamp
 * (by_when == 1: handles of one deadline in the order they were filed, whatever buckets they
 * came through: one filed far ahead cascades into a bucket after one filed later). It sorts
 * (key, handle) pairs: the comparisons read a contiguous array, not each handle's field (a due
 * batch's handles are scattered in memory, and reading the key from each would cost a cache
 * miss per handle per merge pass: most of a large advance's time). */
typedef struct {
    union {
        int64_t tick;
        double when;
    } key;
    uintptr_t seq; /* by deadline: the filing order within one */
    HandleObject *h;
} keyed;

static inline int
keyed_before(const keyed *a, const keyed *b, int by_when)
{
    /* b goes first */
    if (by_when) {
        return b->key.when < a->key.when || (b->key.when == a->key.when && b->seq < a->seq);
    }
    return b->key.tick < a->key.tick;
}

static int
stable_sort(HandleObject **items, Py_ssize_t n, int by_when)
{
    /* A natural merge sort: the ascending runs found in one pass, then merged pairwise. A due
     * batch is mostly in order already (timers filed with one delay come in deadline order),
     * so it takes log2(runs) passes, where a plain bottom-up merge sort takes log2(n). */
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
            a[i].seq = items[i]->seq;
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

/* -- checks (tests/test_native.py) ---------------------------------------------------------- */

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
    Py_RETURN_NONE;
}

/* earliest(expiration): the earliest deadline among the handles of the buckets queued under
 * `expiration` (inf if none): aiowheel._wheel's Wheel.entries_at and aiowheel._store's
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
