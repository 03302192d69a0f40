/* aiowheel/_time/_native/handle.c: the TimerHandle of the compiled build.
 *
 * Mirrors aiowheel/_time/_handles.py's TimerHandle (the pure build's): an asyncio.TimerHandle whose
 * cancel() is O(1), frees the timer at once and says whether it did anything; when(),
 * get_context(), cancelled(), pending(), the repr (made by _handles.handle_repr itself) and the
 * driver's _run / _describe / _abandon. Where it differs, on purpose:
 *
 * - One object, where the pure build has two (the TimerHandle the user holds and the Call
 *   entry the wheel links): C can store the wheel's fields (links, tick, Core) over asyncio's
 *   own slots (see HandleObject in core.h), so a handle is asyncio's size and a walk of a
 *   bucket touches nothing else.
 * - Handles are not tracked by the garbage collector while the wheel has them (the Core
 *   reports what a pending one holds; one that has run and is still held is tracked, see
 *   handle_keep) and, on GIL builds, come from a free list (core.h).
 * - A handle asks its Core directly (under the Core's critical section) instead of going
 *   through the driver's Owner interface; the driver is asked only about a cancel() from
 *   another thread (its claim).
 * - _loop is not kept: reading it raises AttributeError, as an empty slot does.
 */

static HandleObject *
handle_new(PyTypeObject *type)
{
    HandleObject *h;
    if (freelist != NULL) {
        h = freelist;
        freelist = (HandleObject *)h->link.next;
        freelist_len--;
        PyObject_Init((PyObject *)h, type);
    }
    else {
        /* Not tracked, ever: see the top. Before 3.12 the weak reference list is among the
         * slots: it starts NULL (and a dealloc's PyObject_ClearWeakRefs leaves it NULL). */
        h = PyObject_GC_New(HandleObject, type);
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
    if (PyObject_GC_IsTracked((PyObject *)h)) { /* it ran and was kept (handle_keep) */
        PyObject_GC_UnTrack(h);
    }
    /* asyncio's handles take weak references (few do: with the GIL the call is skipped while
     * the list is empty; on a free-threaded build the list is CPython's to read). */
#ifdef Py_GIL_DISABLED
    PyObject_ClearWeakRefs((PyObject *)h);
#else
    if (*(PyObject **)((char *)h + Py_TYPE(h)->tp_weaklistoffset) != NULL) {
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
     * to the one type object from every thread, contended as any shared refcount is; the type
     * lives as long as the module, which holds it. */
    Py_DECREF(Py_TYPE(h)); /* read here: kept in a register across the calls above, it cost
                            * a save and a restore per handle */
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

/* A handle is not tracked by the collector while the wheel has it: the Core reports what a
 * pending one holds, and a due batch's handles are freed as they run. One that has run and
 * that something else still holds (a handle kept in an attribute of the object its callback is
 * a method of: a cycle, collected on asyncio's own handles) is tracked from then on
 * (handle_keep), and its traverse and clear are the collector's. */
static int
handle_traverse(HandleObject *h, visitproc visit, void *arg)
{
    Py_VISIT(h->callback);
    Py_VISIT(h->args);
    Py_VISIT(h->context);
    return 0;
}

/* Only a handle that has run is tracked (above); what it holds is its own, not the wheel's. */
static int
handle_clear(HandleObject *h)
{
    if (h->link.prev == NULL && h->tick != DISPATCHED) {
        Py_CLEAR(h->callback);
        Py_CLEAR(h->args);
        Py_CLEAR(h->context);
    }
    return 0;
}

/* A handle that has run, still held elsewhere: the collector sees it from now on (above). */
static inline void
handle_keep(HandleObject *h)
{
    if (h->tick == RAN && h->callback != NULL && !PyObject_GC_IsTracked((PyObject *)h)) {
        PyObject_GC_Track(h);
    }
}

/* The module state of a handle's type (a handle's type is always the module's own). */
static inline CoreState *
handle_state(HandleObject *h)
{
    return (CoreState *)PyType_GetModuleState(Py_TYPE(h));
}

static PyObject *
callback_repr(CoreState *st, PyObject *callback)
{
    if (st->callback_repr == NULL) {
        return PyObject_Repr(callback);
    }
    return PyObject_CallOneArg(st->callback_repr, callback);
}

/* asyncio's repr (<TimerHandle when=... callback() at file:line>, "cancelled" after cancel()),
 * made by the same Python function as the pure build's; nothing on the hot path asks for it. */
static PyObject *
handle_repr(HandleObject *h)
{
    CoreState *st = handle_state(h);
    if (st == NULL) {
        return NULL;
    }
    if (st->handle_repr == NULL) {
        PyObject *module = PyImport_ImportModule("aiowheel._time._handles");
        if (module == NULL) {
            return NULL;
        }
        PyObject *func = PyObject_GetAttrString(module, "handle_repr");
        Py_DECREF(module);
        if (func == NULL) {
            return NULL;
        }
        Py_XSETREF(st->handle_repr, func);
    }
    return PyObject_CallOneArg(st->handle_repr, (PyObject *)h);
}

static PyObject *
handle_when(HandleObject *h, PyObject *Py_UNUSED(ignored))
{
    return PyFloat_FromDouble(h->when);
}

static PyObject *
handle_get_context(HandleObject *h, PyObject *Py_UNUSED(ignored))
{
    CoreState *st = handle_state(h);
    if (st == NULL) {
        return NULL;
    }
    if (h->context == NULL || h->context == st->empty_context) {
        return PyContext_New();
    }
    return Py_NewRef(h->context);
}

/* On a free-threaded build every cancel() is checked for its thread, as the driver's own
 * (aiowheel._time._threads.FREE_THREADED); with the GIL only in debug mode, and only while the handle
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
        /* Another thread: the driver says whether it may take the loop over (its loop is not
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
        if (claim != Py_None) { /* a Core made without an driver (tests) has none to ask */
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
report(CoreState *st, HandleObject *h, PyObject *callback)
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
    if (st->get_running_loop == NULL) { /* a module object setup() was not given to */
        PyErr_SetString(PyExc_RuntimeError, "aiowheel._time._core: setup() was not called");
        goto done;
    }
    loop = PyObject_CallNoArgs(st->get_running_loop);
    if (loop == NULL) {
        goto done;
    }
    name = callback_repr(st, callback);
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
    res = PyObject_CallMethodOneArg(loop, st->str_call_exception_handler, ctx);
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

/* A handle scheduled from an empty context runs in a fresh empty one, what a copy taken when
 * it was scheduled would have been, so nothing one run sets leaks into another. On GIL builds
 * the fresh context is kept for the next such run when it comes back as it went: still empty
 * and referenced by nothing else. No code can tell it from a new one (Python code reaches a
 * context only through a copy, contextvars.copy_context(), and a variable set in it leaves it
 * non-empty, so it is dropped), and a batch of such timers no longer allocates and frees a
 * context per callback. A run that starts while the spare is in use (a callback running a
 * handle itself) takes a new one. */
static PyObject *
spare_take(CoreState *st)
{
#ifndef Py_GIL_DISABLED
    PyObject *spare = st->spare_context;
    if (spare != NULL) {
        st->spare_context = NULL;
        return spare;
    }
#else
    (void)st;
#endif
    return PyContext_New();
}

/* A fresh context back after its run (the reference passes): kept, or let go. */
static void
spare_give(CoreState *st, PyObject *context)
{
#ifndef Py_GIL_DISABLED
    if (st->spare_context == NULL && Py_REFCNT(context) == 1 &&
        Py_TYPE(context)->tp_as_mapping->mp_length(context) == 0) {
        st->spare_context = context;
        return;
    }
#else
    (void)st;
#endif
    Py_DECREF(context);
}

/* What a callback's call came to (`res` stolen): 0, or -1 only for what must leave the loop
 * (SystemExit, KeyboardInterrupt, or a failing exception handler); any other exception goes
 * to the loop's exception handler, outside the callback's context. */
static int
call_status(CoreState *st, HandleObject *h, PyObject *callback, PyObject *res)
{
    if (res != NULL) {
        Py_DECREF(res);
        return 0;
    }
    if (PyErr_ExceptionMatches(PyExc_SystemExit) ||
        PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {
        return -1;
    }
    return report(st, h, callback);
}

static inline PyObject *
call_now(PyObject *callback, PyObject *args)
{
    return PyObject_Vectorcall(callback, &PyTuple_GET_ITEM(args, 0), PyTuple_GET_SIZE(args),
                               NULL);
}

/* Run a callback in its context (steals the three references; context NULL or the shared
 * empty one: scheduled from an empty context, so a fresh one). */
static int
handle_call(CoreState *st, HandleObject *h, PyObject *callback, PyObject *args,
            PyObject *context)
{
    int fresh = context == NULL || context == st->empty_context;
    if (fresh) {
        Py_XSETREF(context, spare_take(st));
        if (context == NULL) {
            Py_DECREF(callback);
            Py_DECREF(args);
            return -1;
        }
    }
    PyObject *res = NULL;
    if (PyContext_Enter(context) == 0) {
        res = call_now(callback, args);
        PyContext_Exit(context);
    }
    if (fresh) {
        spare_give(st, context);
    }
    else {
        Py_DECREF(context);
    }
    int status = call_status(st, h, callback, res);
    Py_DECREF(callback);
    Py_DECREF(args);
    return status;
}

/* The context a batch's runs from an empty context share (handle_run), with its reference
 * count once entered. */
typedef struct {
    PyObject *context; /* entered; NULL: none held */
    Py_ssize_t refs;
} held_t;

/* Leave the held context, if one is held (kept as the spare if it came back as it went). */
static void
held_leave(CoreState *st, held_t *held)
{
    PyObject *context = held->context;
    if (context != NULL) {
        held->context = NULL;
        PyContext_Exit(context);
        spare_give(st, context);
    }
}

/* Whether the held context is as it was entered: the thread's current one, empty, and
 * referenced by nothing new (checked before each reuse, so that what ran between two
 * callbacks, a freed handle's finalizers included, counts too). */
static inline int
held_intact(const held_t *held)
{
    PyObject *context = held->context;
    return Py_REFCNT(context) == held->refs && PyThreadState_GET()->context == context &&
           Py_TYPE(context)->tp_as_mapping->mp_length(context) == 0;
}

/* The batch's run of a due handle: it ran, then its callback (nothing if it was cancelled
 * after it was dispatched). `held` NULL: a run on its own (TimerHandle._run()).
 *
 * A batch runs its handles from an empty context in one fresh context entered once (held,
 * left by held_leave at the end of the batch, before a handle with a context of its own, and
 * before an exception is reported), not entered and left around each callback, for as long as
 * each callback leaves it as it found it: empty, and referenced by nothing new. That is what
 * entering a new empty context for each would have given it (a callback that sets a variable
 * or keeps a reference makes the next one start in a new context); only C code watching
 * context switches (3.14's PyContext_AddWatcher) sees fewer of them. */
static int
handle_run(CoreState *st, HandleObject *h, held_t *held)
{
    PyObject *callback = NULL, *args = NULL, *context = NULL;
    Py_BEGIN_CRITICAL_SECTION(h->core); /* against a cancel() from another thread */
    if (h->tick == DISPATCHED) { /* else cancelled after it was dispatched */
        h->tick = RAN;
        if (h->callback != NULL && h->args != NULL) {
            callback = Py_NewRef(h->callback);
            args = Py_NewRef(h->args);
            context = Py_XNewRef(h->context);
        }
    }
    Py_END_CRITICAL_SECTION();
    if (callback == NULL) {
        return 0;
    }
    if (held == NULL || (context != NULL && context != st->empty_context)) {
        if (held != NULL) {
            held_leave(st, held);
        }
        return handle_call(st, h, callback, args, context);
    }
    Py_XDECREF(context);
    if (held->context != NULL && !held_intact(held)) {
        held_leave(st, held);
    }
    if (held->context == NULL) {
        PyObject *fresh = spare_take(st);
        if (fresh == NULL || PyContext_Enter(fresh) < 0) {
            Py_XDECREF(fresh);
            int status = call_status(st, h, callback, NULL);
            Py_DECREF(callback);
            Py_DECREF(args);
            return status;
        }
        held->context = fresh;
        held->refs = Py_REFCNT(fresh);
    }
    PyObject *res = call_now(callback, args);
    if (res == NULL) {
        held_leave(st, held); /* the exception is reported outside the callback's context */
    }
    int status = call_status(st, h, callback, res);
    Py_DECREF(callback);
    Py_DECREF(args);
    return status;
}

/* What _run() and _run_due() return once the callback has run (status < 0: it raised past
 * the loop's handler): the handle is the caller's, so one that has run is tracked (handle_keep). */
static PyObject *
run_for_caller(HandleObject *h, int status)
{
    handle_keep(h);
    if (status < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* TimerHandle._run() called by code, as on asyncio's handles (Home Assistant's
 * async_fire_time_changed runs the handles due by a time itself, then cancels them): the
 * callback runs now and the handle stays as it was. A pending one stays pending (for cancel()
 * to cancel, or to run again at its deadline); one handed to a due batch still runs there when
 * its turn comes, or not at all if cancel() follows (which then returns True), as a handle in
 * asyncio's _ready does; one that ran runs again, as asyncio's _run() does; a cancelled one
 * does nothing. Mirrors _handles.TimerHandle._run. */
static PyObject *
handle_run_method(HandleObject *h, PyObject *Py_UNUSED(ignored))
{
    CoreState *st = handle_state(h);
    if (st == NULL) {
        return NULL;
    }
    PyObject *callback = NULL, *args = NULL, *context = NULL;
    Py_BEGIN_CRITICAL_SECTION(h->core);
    if (h->link.prev != NULL || h->tick == RAN || h->tick == DISPATCHED) {
        if (h->callback != NULL && h->args != NULL) {
            callback = Py_NewRef(h->callback);
            args = Py_NewRef(h->args);
            context = Py_XNewRef(h->context);
        }
    }
    Py_END_CRITICAL_SECTION();
    int status = callback == NULL ? 0 : handle_call(st, h, callback, args, context);
    return run_for_caller(h, status);
}

/* TimerHandle._run_due(): a due batch run by aiowheel._time._dispatch.run_batch (a batch with entries
 * of the driver's too) or as a loop callback of its own (debug mode) runs it: it leaves the
 * batch, then its callback runs, nothing if it was cancelled after it was dispatched (the
 * entries' Timed._run_due). */
static PyObject *
handle_run_due(HandleObject *h, PyObject *Py_UNUSED(ignored))
{
    CoreState *st = handle_state(h);
    if (st == NULL) {
        return NULL;
    }
    return run_for_caller(h, handle_run(st, h, NULL));
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
    {"_run_due", (PyCFunction)handle_run_due, METH_NOARGS, NULL},
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

static PyObject *
handle_get_seq(HandleObject *h, void *Py_UNUSED(closure))
{
    return PyLong_FromSize_t((size_t)h->seq);
}

static PyGetSetDef handle_getset[] = {
    {"_seq", (getter)handle_get_seq, NULL, NULL, NULL},
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
     "A callback scheduled with :meth:`Timer.call_at` or :meth:`Timer.call_later` (or a\n"
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
