/* aiowheel/_time/_native/module.c: the Core object's life cycle, and the module.
 *
 * The Core's construction, garbage-collector support and deallocation, its method table (each
 * method of the driver's side under the Core's critical section), introspection (entries,
 * removed, queued, elapsed, len), close(); the DONE awaitable; and the module: setup(), the
 * module state (core.h), multi-phase init. Its Python side is aiowheel/_time/_store.py, whose
 * NativeStore makes its Core when the driver binds to a loop (NativeStore.attach) and hands
 * setup() its helpers at import. No Python file has this shape to mirror: the pure build has no
 * Core (its store holds one Wheel).
 *
 * What stays process-wide, and why: DoneType (a static type: stateless, the same for any
 * module object), the free list (core.h) and loop_setattr's watcher (router.c). So the module
 * declares that it does not support subinterpreters.
 */

/* -- Core: what the driver reads, and closing ------------------------------------------------ */

/* entries(): every pending handle (Wheel.entries, for introspection). */
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


/* close(): drain (the handles, for the driver to abandon), and let go of the driver. */
static PyObject *
core_close(CoreObject *c, PyObject *Py_UNUSED(ignored))
{
    PyObject *list = core_drain(c, NULL);
    c->fast = 0;
    Py_CLEAR(c->arm);
    Py_CLEAR(c->claim); /* a closed driver's claim allows every cancel: no driver to ask */
    c->armed = INT64_MAX;
    c->exact_at = -INFINITY;
    return list;
}

/* Core.stamp(): the next filing stamp, for an entry the driver files in its own wheel (its
 * tie order among the core's handles: aiowheel._time._dispatch.merge). */
static PyObject *
core_stamp(CoreObject *c, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromSize_t((size_t)++c->seq);
}

/* Core.seq: the stamps given so far; set by a store whose entries were stamped before it had
 * this core, so that later stamps follow theirs. */
static PyObject *
core_get_seq(CoreObject *c, void *Py_UNUSED(closure))
{
    return PyLong_FromSize_t((size_t)c->seq);
}

static int
core_set_seq(CoreObject *c, PyObject *value, void *Py_UNUSED(closure))
{
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "Core.seq cannot be deleted");
        return -1;
    }
    size_t seq = PyLong_AsSize_t(value);
    if (seq == (size_t)-1 && PyErr_Occurred()) {
        return -1;
    }
    c->seq = (uintptr_t)seq;
    return 0;
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

/* Core(arm, tick, slots, epoch, clock): `arm` is the driver's re-arm, `clock` None for the
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
    PyObject *module = PyType_GetModuleByDef(type, &core_module);
    if (module == NULL) {
        return NULL;
    }
    CoreObject *c = (CoreObject *)type->tp_alloc(type, 0);
    if (c == NULL) {
        return NULL;
    }
    c->module = Py_NewRef(module);
    c->state = (CoreState *)PyModule_GetState(module);
    c->handle_type = c->state->handle_type;
    c->empty_tuple = c->state->empty_tuple;
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
        PyMem_Free(c->buckets); /* not yet linked up: core_clear must not walk them */
        c->buckets = NULL;
        Py_DECREF(c);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < c->nbuckets; i++) {
        c->buckets[i].prev = c->buckets[i].next = &c->buckets[i];
        c->queued[i] = QUEUED_NONE;
    }
    c->never.prev = c->never.next = &c->never;
    if (heap_alloc(c) < 0) { /* for every bucket: queuing one never fails (wheel.c) */
        Py_DECREF(c);
        return NULL;
    }
    for (int n = 0; n < (int)sizeof(c->level_of); n++) {
        int level = (n > 0 ? n - 1 : 0) / bits;
        c->level_of[n] = (unsigned char)(level < levels ? level : levels - 1);
    }
    c->inv_tick = 1.0 / tick;
    core_set_epoch(c, epoch);
    c->clock = clock == Py_None ? NULL : Py_NewRef(clock);
    c->armed = INT64_MAX;
    c->exact_at = -INFINITY;
    c->arm = Py_NewRef(arm);
    c->claim = claim == Py_None ? NULL : Py_NewRef(claim);
    c->threshold = INFINITY;
    return (PyObject *)c;
}

static int
core_traverse(CoreObject *c, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(c)); /* a heap type's instance holds it */
    Py_VISIT(c->module);
    Py_VISIT(c->clock);
    Py_VISIT(c->arm);
    Py_VISIT(c->claim);
    Py_VISIT(c->near_call_at);
    Py_VISIT(c->near_call_later);
    Py_VISIT(c->slow_call_at);
    Py_VISIT(c->slow_call_later);
    Py_VISIT(c->note_guard);
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
    Py_CLEAR(c->note_guard);
    return 0;
}

static void
core_dealloc(CoreObject *c)
{
    PyTypeObject *type = Py_TYPE(c);
    PyObject_GC_UnTrack(c);
    core_clear(c);
    PyMem_Free(c->buckets);
    PyMem_Free(c->queued);
    PyMem_Free(c->heap);
    /* Kept through core_clear (a collector's clear too), which frees pending handles: their
     * type is the module's. */
    Py_CLEAR(c->module);
    type->tp_free((PyObject *)c);
    Py_DECREF(type);
}

/* The driver's side of the Core, each under the Core's critical section (see the top). */
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
LOCKED_FAST(core_set_armed)
LOCKED_O(core_earliest)
LOCKED_FAST(core_update)
LOCKED_FAST(core_route)
LOCKED_O(core_note_guards)
LOCKED_O(core_check)
LOCKED_O(core_queued_at)
LOCKED_O(core_stamp)

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
    {"set_armed", (PyCFunction)(void (*)(void))core_set_armed_locked, METH_FASTCALL, NULL},
    {"earliest", (PyCFunction)core_earliest_locked, METH_O, NULL},
    {"update", (PyCFunction)(void (*)(void))core_update_locked, METH_FASTCALL, NULL},
    {"route", (PyCFunction)(void (*)(void))core_route_locked, METH_FASTCALL, NULL},
    {"note_guards", (PyCFunction)core_note_guards_locked, METH_O, NULL},
    {"check", (PyCFunction)core_check_locked, METH_NOARGS, NULL},
    {"queued_at", (PyCFunction)core_queued_at_locked, METH_O, NULL},
    {"stamp", (PyCFunction)core_stamp_locked, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef core_getset[] = {
    {"removed", (getter)core_get_removed, NULL, NULL, NULL},
    {"queued", (getter)core_get_queued, NULL, NULL, NULL},
    {"elapsed", (getter)core_get_elapsed, NULL, NULL, NULL},
    {"fast", (getter)core_get_fast, NULL, NULL, NULL},
    {"native_clock", (getter)core_get_native_clock, NULL, NULL, NULL},
    {"seq", (getter)core_get_seq, (setter)core_set_seq, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* A heap type, made per module object (core_new finds its module through it). */
static PyType_Slot core_slots[] = {
    {Py_tp_dealloc, core_dealloc},
    {Py_tp_traverse, core_traverse},
    {Py_tp_clear, core_clear},
    {Py_tp_methods, core_methods},
    {Py_tp_getset, core_getset},
    {Py_tp_new, core_new},
    {Py_sq_length, core_len},
    {Py_tp_doc, "An driver's wheel of callback handles (see the module source)."},
    {0, NULL},
};

static PyType_Spec core_spec = {
    .name = "aiowheel._time._core.Core",
    .basicsize = sizeof(CoreObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = core_slots,
};

/* -- DONE: an awaitable already finished -------------------------------------------------------
 *
 * ``await DONE`` is None at once: its __await__ is itself, an iterator already exhausted, so the
 * interpreter's SEND gets NULL with no exception set, which reads as "returned None" (no
 * StopIteration is made, nothing is allocated). Timeout.__aexit__ returns it (see
 * aiowheel._time._awaiting). Stateless, so one instance serves every await at once, on any thread. */

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
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "aiowheel._time._core.Done",
    .tp_basicsize = sizeof(DoneObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An awaitable already finished: ``await DONE`` is None at once.",
    .tp_repr = done_repr,
    .tp_as_async = &done_as_async,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = done_next,
    .tp_methods = done_methods,
};


/* -- the module ------------------------------------------------------------------------------ */

/* setup(callback_repr, empty_context, get_running_loop, guarded_at, guarded_later):
 * aiowheel._time._store hands over the Python helpers the handles use, and the callbacks loop
 * mode's calls hand to the slow path (CoreState), once, at its import. */
static PyObject *
setup(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "setup(callback_repr, empty_context, get_running_loop, "
                                         "guarded_at, guarded_later)");
        return NULL;
    }
    CoreState *st = (CoreState *)PyModule_GetState(module);
    Py_XSETREF(st->callback_repr, Py_NewRef(args[0]));
    Py_XSETREF(st->empty_context, Py_NewRef(args[1]));
    Py_XSETREF(st->get_running_loop, Py_NewRef(args[2]));
    Py_XSETREF(st->guarded_at, Py_NewRef(args[3]));
    Py_XSETREF(st->guarded_later, Py_NewRef(args[4]));
    Py_RETURN_NONE;
}

/* running_loop(): asyncio._get_running_loop() without its getpid() system call (3.11).
 *
 * 3.11's _asyncio keeps the running loop in a holder object in the thread's state dict, with the
 * process id it was set in, and compares that id with getpid() on every lookup, so that a forked
 * child does not see its parent's loop as running: a system call per lookup, as much as the rest
 * of a call_later (3.12 dropped the check). This reads the same holder and compares the same id
 * with this process's id, cached: read at import and again in every forked child by a
 * pthread_atfork handler, which runs inside fork() itself, before any Python code of the child
 * (os.fork's hooks included). Anything unexpected (no state dict, a holder of another type or
 * size) falls back to asyncio's own call. aiowheel._time._threads uses it only when asyncio's
 * _get_running_loop is the C one (the pure-Python one keeps the loop in a threading.local), and
 * only on GIL builds of 3.11 (3.12+ and free-threaded builds call asyncio's, which is cheap
 * there). */
#if PY_VERSION_HEX < 0x030C0000 && !defined(MS_WINDOWS) && defined(HAVE_GETPID) && \
    !defined(Py_GIL_DISABLED)
#define AIOWHEEL_PID_CACHE 1
#include <pthread.h>
#include <unistd.h>

typedef struct { /* 3.11's PyRunningLoopHolder (Modules/_asynciomodule.c) */
    PyObject_HEAD
    PyObject *rl_loop;
    pid_t rl_pid;
} RunningLoopHolder;

static pid_t cached_pid = 0;       /* this process's id: set at exec and in each forked child */
static int atfork_registered = 0;  /* process-wide, like the pid: one handler per process */
static PyTypeObject *holder_type = NULL; /* the holder's type, once recognised (immortal: static) */
static PyObject *str_running_key = NULL; /* "__asyncio_running_event_loop__", interned */

static void
pid_after_fork_in_child(void)
{
    cached_pid = getpid();
}

static int
pid_cache_init(void)
{
    if (!atfork_registered) {
        cached_pid = getpid();
        if (pthread_atfork(NULL, NULL, pid_after_fork_in_child) != 0) {
            PyErr_SetString(PyExc_RuntimeError, "pthread_atfork failed");
            return -1;
        }
        atfork_registered = 1;
    }
    if (str_running_key == NULL) {
        str_running_key = PyUnicode_InternFromString("__asyncio_running_event_loop__");
        if (str_running_key == NULL) {
            return -1;
        }
    }
    return 0;
}
#endif

static PyObject *
running_loop(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
#ifdef AIOWHEEL_PID_CACHE
    PyObject *dict = PyThreadState_GetDict(); /* borrowed; NULL: none (then no loop runs) */
    if (dict != NULL && str_running_key != NULL) {
        PyObject *holder = PyDict_GetItemWithError(dict, str_running_key); /* borrowed */
        if (holder == NULL) {
            if (PyErr_Occurred()) {
                return NULL;
            }
            Py_RETURN_NONE; /* no loop was ever set running in this thread */
        }
        PyTypeObject *type = Py_TYPE(holder);
        if (type != holder_type && type->tp_basicsize == (Py_ssize_t)sizeof(RunningLoopHolder) &&
            strcmp(type->tp_name, "_RunningLoopHolder") == 0) {
            holder_type = type;
        }
        if (type == holder_type) {
            RunningLoopHolder *h = (RunningLoopHolder *)holder;
            if (h->rl_loop == Py_None || h->rl_pid != cached_pid) {
                Py_RETURN_NONE; /* none running, or set in the parent before a fork */
            }
            return Py_NewRef(h->rl_loop);
        }
    }
#endif
    /* asyncio's own answer (a path aiowheel._time._threads does not take where the above applies) */
    PyObject *asyncio = PyImport_ImportModule("asyncio");
    if (asyncio == NULL) {
        return NULL;
    }
    PyObject *loop = PyObject_CallMethod(asyncio, "_get_running_loop", NULL);
    Py_DECREF(asyncio);
    return loop;
}

static PyObject *
freelist_size(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromLong(freelist_len);
}

/* _fail_allocations(n): for tests only. */
static PyObject *
fail_allocations(PyObject *Py_UNUSED(module), PyObject *arg)
{
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "_fail_allocations(n): n must be >= 0");
        return NULL;
    }
    Py_ssize_t before = heap_fail_after;
    heap_fail_after = n;
    return PyLong_FromSsize_t(before);
}

/* heap_guard(scheduled, tasks, before): aiowheel._seeing._census._walk in C, over a list of
 * asyncio.TimerHandles (asyncio's own heap, loop._scheduled): the earliest deadline before
 * `before` of an asyncio.timeout guarding one of `tasks` (a tuple), or None; NotImplemented
 * where the walk needs what only the Python one reads (an item of another type, a `_when` not a
 * float, an empty slot, 3.11's wait_for timer due before the bound): the caller walks in
 * Python then. The request path asks it once or twice per request (aiowheel.time_left, a client
 * adapter's budget), and a server's heap holds its keep-alive timers and their cancelled
 * tombstones, each of which the Python walk read through the interpreter. Free-threaded builds
 * walk in Python (the list is read without a lock here). */
static PyObject *
heap_guard(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyList_Check(args[0]) || !PyTuple_Check(args[1]) ||
        !PyFloat_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "heap_guard(scheduled: list, tasks: tuple, before: float)");
        return NULL;
    }
#ifdef Py_GIL_DISABLED
    Py_RETURN_NOTIMPLEMENTED;
#else
    CoreState *st = (CoreState *)PyModule_GetState(module);
    PyTypeObject *base = st->handle_type->tp_base; /* asyncio.TimerHandle */
    PyObject *list = args[0], *tasks = args[1];
    double bound = PyFloat_AS_DOUBLE(args[2]);
    int found = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); i++) {
        PyObject *h = PyList_GET_ITEM(list, i);
        if (Py_TYPE(h) != base) {
            Py_RETURN_NOTIMPLEMENTED;
        }
        PyObject *w = *(PyObject **)((char *)h + offsetof(HandleObject, seq)); /* _when */
        if (w == NULL || !PyFloat_CheckExact(w)) {
            Py_RETURN_NOTIMPLEMENTED;
        }
        double when = PyFloat_AS_DOUBLE(w);
        if (when >= bound) {
            continue;
        }
        PyObject *cb = *(PyObject **)((char *)h + offsetof(HandleObject, callback));
        if (cb == NULL) {
            Py_RETURN_NOTIMPLEMENTED;
        }
        if (Py_IS_TYPE(cb, &PyMethod_Type)) {
            if (PyMethod_GET_FUNCTION(cb) != st->guarded_at || st->guarded_at == NULL) {
                continue;
            }
            /* getattr(callback.__self__, "_task", None) in tasks and not handle._cancelled:
             * the handle held while a lookup could run code (a Timeout's own: it does not). */
            Py_INCREF(h);
            PyObject *task = PyObject_GetAttrString(PyMethod_GET_SELF(cb), "_task");
            if (task == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
                    Py_DECREF(h);
                    return NULL;
                }
                PyErr_Clear();
            }
            int in = task == NULL ? 0 : PySequence_Contains(tasks, task);
            Py_XDECREF(task);
            if (in < 0) {
                Py_DECREF(h);
                return NULL;
            }
            if (in) {
                PyObject *cancelled = *(PyObject **)((char *)h + offsetof(HandleObject, tick));
                int yes = cancelled == NULL ? -2 : PyObject_IsTrue(cancelled);
                if (yes == -2) {
                    Py_DECREF(h);
                    Py_RETURN_NOTIMPLEMENTED;
                }
                if (yes < 0) {
                    Py_DECREF(h);
                    return NULL;
                }
                if (!yes) {
                    bound = when;
                    found = 1;
                }
            }
            Py_DECREF(h);
        }
        else if (cb == st->guarded_later && cb != Py_None) {
            Py_RETURN_NOTIMPLEMENTED; /* 3.11's wait_for timer: its task read in Python */
        }
    }
    if (!found) {
        Py_RETURN_NONE;
    }
    return PyFloat_FromDouble(bound);
#endif
}

static PyMethodDef module_methods[] = {
    {"setup", (PyCFunction)(void (*)(void))setup, METH_FASTCALL, NULL},
    {"freelist_size", (PyCFunction)freelist_size, METH_NOARGS, NULL},
    {"_fail_allocations", (PyCFunction)fail_allocations, METH_O,
     "_fail_allocations($module, n, /)\n--\n\n"
     "For tests only: the n-th attempt from now to allocate (grow) a Core's heap of bucket\n"
     "expirations fails with MemoryError (0: none does). The heap is allocated once, for\n"
     "every bucket, when the Core is made. Returns the countdown it replaces: still n if no\n"
     "allocation was attempted, 0 if the failure was spent (or none was set)."},
    {"running_loop", (PyCFunction)running_loop, METH_NOARGS, NULL},
    {"watch_time", (PyCFunction)watch_time, METH_O, NULL},
    {"watch_scheduled", (PyCFunction)(void (*)(void))watch_scheduled, METH_FASTCALL, NULL},
    {"heap_guard", (PyCFunction)(void (*)(void))heap_guard, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
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

/* The handle type: asyncio.TimerHandle's subclass, once its layout is checked to be the one
 * HandleObject is stored over (see core.h). */
static PyTypeObject *
make_handle_type(PyObject *module)
{
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
        slot_offset(base, "_when") != offsetof(HandleObject, seq)) {
        PyErr_Clear();
        PyErr_Format(PyExc_ImportError,
                     "aiowheel._time._core: asyncio.TimerHandle's layout is not the one this core "
                     "was written for (%zd bytes)",
                     PyType_Check(base) ? ((PyTypeObject *)base)->tp_basicsize : -1);
        Py_DECREF(base);
        return NULL;
    }
    PyObject *type = PyType_FromModuleAndSpec(module, &handle_spec, base);
    Py_DECREF(base);
    return (PyTypeObject *)type;
}

static int
core_exec(PyObject *m)
{
    CoreState *st = (CoreState *)PyModule_GetState(m);
#ifdef AIOWHEEL_PID_CACHE
    if (pid_cache_init() < 0) {
        return -1;
    }
#endif
    st->handle_type = make_handle_type(m);
    if (st->handle_type == NULL) {
        return -1;
    }
    st->core_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &core_spec, NULL);
    if (st->core_type == NULL || PyType_Ready(&DoneType) < 0 || scheduled_ready(m) < 0) {
        return -1;
    }
    st->str_context = PyUnicode_InternFromString("context");
    st->str_call_exception_handler = PyUnicode_InternFromString("call_exception_handler");
    st->str_call_soon = PyUnicode_InternFromString("call_soon");
    st->empty_tuple = PyTuple_New(0);
    if (!st->str_context || !st->str_call_exception_handler || !st->str_call_soon ||
        !st->empty_tuple) {
        return -1;
    }
    PyObject *setattr_descr = PyDescr_NewMethod(&PyBaseObject_Type, &loop_setattr_def);
    int set = setattr_descr == NULL ? -1 : PyModule_AddObjectRef(m, "loop_setattr", setattr_descr);
    Py_XDECREF(setattr_descr);
    if (set < 0) {
        return -1;
    }
    PyObject *done = PyType_GenericAlloc(&DoneType, 0);
    int added = done == NULL ? -1 : PyModule_AddObjectRef(m, "DONE", done);
    Py_XDECREF(done);
    if (added < 0) {
        return -1;
    }
    if (PyModule_AddObjectRef(m, "TimerHandle", (PyObject *)st->handle_type) < 0 ||
        PyModule_AddObjectRef(m, "Core", (PyObject *)st->core_type) < 0) {
        return -1;
    }
    return 0;
}

static int
core_module_traverse(PyObject *m, visitproc visit, void *arg)
{
    CoreState *st = (CoreState *)PyModule_GetState(m);
    Py_VISIT(st->handle_type);
    Py_VISIT(st->core_type);
    Py_VISIT(st->callback_repr);
    Py_VISIT(st->empty_context);
    Py_VISIT(st->get_running_loop);
    Py_VISIT(st->guarded_at);
    Py_VISIT(st->guarded_later);
    Py_VISIT(st->handle_repr);
#ifndef Py_GIL_DISABLED
    Py_VISIT(st->spare_context);
#endif
    return 0;
}

static int
core_module_clear(PyObject *m)
{
    CoreState *st = (CoreState *)PyModule_GetState(m);
    Py_CLEAR(st->handle_type);
    Py_CLEAR(st->core_type);
    Py_CLEAR(st->callback_repr);
    Py_CLEAR(st->empty_context);
    Py_CLEAR(st->get_running_loop);
    Py_CLEAR(st->guarded_at);
    Py_CLEAR(st->guarded_later);
    Py_CLEAR(st->handle_repr);
    Py_CLEAR(st->empty_tuple);
    Py_CLEAR(st->str_context);
    Py_CLEAR(st->str_call_exception_handler);
    Py_CLEAR(st->str_call_soon);
#ifndef Py_GIL_DISABLED
    Py_CLEAR(st->spare_context);
    for (int i = 0; i < 2; i++) {
        PyMem_Free(st->scratch[i].items);
        st->scratch[i] = (karray){NULL, 0, 0};
    }
#endif
    return 0;
}

static void
core_module_free(void *m)
{
    core_module_clear((PyObject *)m);
}

static PyModuleDef_Slot core_module_slots[] = {
    {Py_mod_exec, core_exec},
#ifdef Py_mod_multiple_interpreters
    /* Not in subinterpreters: the free list, DoneType and loop_setattr's watcher are shared
     * by every module object of the process (see core.h and router.c). */
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
#ifdef Py_mod_gil
    /* Free-threading: the per-Core critical sections are the whole locking (see _core.c). */
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "aiowheel._time._core",
    .m_doc = "The native core of aiowheel's compiled build (see aiowheel/_time/_core.c).",
    .m_size = sizeof(CoreState),
    .m_methods = module_methods,
    .m_slots = core_module_slots,
    .m_traverse = core_module_traverse,
    .m_clear = core_module_clear,
    .m_free = core_module_free,
};

PyMODINIT_FUNC
PyInit__core(void)
{
    return PyModuleDef_Init(&core_module);
}
