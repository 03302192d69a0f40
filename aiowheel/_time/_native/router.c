/* aiowheel/_time/_native/router.c: filing a handle, and loop mode's call_at / call_later.
 *
 * Filing (core_file) mirrors the driver's filing of a callback timer in aiowheel/_time/_driver.py and
 * aiowheel/_time/_store.py (Driver.call, NativeStore.file_call: a handle for callback(*args) in a
 * context, into the wheel, the
 * driver's wake-up armed if its bucket is now the earliest); Timer.call_at reaches it through
 * Core.file, loop mode's calls directly. The router mirrors aiowheel/_loopmode/_loopcalls.py
 * (LoopCalls.call_at / call_later and _hand_over): a float deadline (or an int one that
 * converts exactly) at least `threshold` ahead, with a callable, goes to the wheel; a nearer
 * one straight to the base loop's heap (padded by near_pad); anything else to the slow path,
 * the Python LoopCalls, which checks it or lets the base loop do so. loop_setattr, at the end,
 * is the C twin of the __setattr__ of aiowheel/_loopmode/_loop.py's loop classes. Where it differs, on
 * purpose:
 *
 * - A deadline past the int64 grid (clock.c) is not filed: core_file answers NotImplemented
 *   and the call takes the slow path, to the driver's own wheel.
 * - Only the plain context= keyword is read here (one keyword, named context); a call with
 *   any other keyword takes the slow path, the Python LoopCalls, which answers it.
 * - With the GIL a call from another thread is not checked outside debug mode (as asyncio's);
 *   on a free-threaded build it takes the slow path, where the driver decides (foreign_thread).
 * - asyncio's call_later (call_at(time() + delay)) is done here when the base loop's is
 *   asyncio's, instead of calling it.
 */

/* -- filing --------------------------------------------------------------------------------- */

/* Whether the thread's current context holds no variable. Then the handle keeps the shared
 * empty context and handle_run makes a fresh one per run (what a copy would have been), so the
 * common case (no context variable set: every benchmark, most servers) allocates no context
 * per timer: a copy is a GC-tracked object allocated here and freed at cancel(), a sizable
 * part of a schedule + cancel. The thread state's `context` is the current one (NULL before any is
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
         * far): beyond the core's int64 grid, where it would never come due. The driver's
         * wheel (Python ints) files it: NotImplemented says so to every caller. */
        Py_RETURN_NOTIMPLEMENTED;
    }
    HandleObject *h = handle_new(c->handle_type);
    if (h == NULL) {
        return NULL;
    }
    h->callback = NULL;
    h->args = NULL;
    h->context = NULL;
    h->when = when;
    h->seq = ++c->seq;
    h->tick = CANCELLED;
    if (context == NULL && current_context_is_empty()) {
        /* No reference at all (NULL, not the shared empty context): on a free-threaded build
         * one object's refcount written by every thread's timers is contended, which keeps
         * loop mode's churn from scaling with threads. */
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
    PyObject *tuple = nargs == 0 ? Py_NewRef(c->empty_tuple) : PyTuple_New(nargs);
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
    if (core_arm_if_earlier(c, wheel_insert(c, h, tick), when) < 0) {
        /* The wake-up could not be armed (the driver's arm raised): the call raises, so the
         * handle leaves the wheel again, as if never filed (its bucket, queued, is passed over
         * empty). A handle filed though its call raised would run later all the same. */
        if (h->link.prev != NULL) {
            wheel_unlink(c, h);
            Py_DECREF(h); /* the wheel's */
        }
        h->tick = CANCELLED;
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

/* -- the router: a loop-mode loop's call_at / call_later ------------------------------------ */

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

/* method(time, callback, *rest, [context=context]), as aiowheel._loopmode._loopcalls._hand_over. */
static PyObject *
hand_over(CoreState *st, PyObject *method, PyObject *time, PyObject *const *args, Py_ssize_t nargs,
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
        PyObject *names = PyTuple_Pack(1, st->str_context);
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
read_context(CoreState *st, PyObject *kwnames, PyObject *const *args, Py_ssize_t nargs, PyObject **context)
{
    *context = NULL;
    if (kwnames == NULL) {
        return 1;
    }
    if (PyTuple_GET_SIZE(kwnames) != 1) {
        return 0;
    }
    PyObject *name = PyTuple_GET_ITEM(kwnames, 0);
    if (name != st->str_context && !(PyUnicode_Check(name) &&
                                     PyUnicode_Compare(name, st->str_context) == 0)) {
        return 0;
    }
    if (args[nargs] != Py_None) {
        *context = args[nargs];
    }
    return 1;
}

/* On a free-threaded build a call from a thread that is not the loop's takes the slow path,
 * where the driver takes the loop over (it is not running) or refuses, and files under its
 * take-over lock: filed here directly, a wheel's bucket queued before the armed wake-up would
 * call the driver's _arm from that thread, racing the loop's own (a lost wake-up). With the
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

/* Whether a near deadline still ahead goes to the wheel: when a wheel timer may run by its
 * tick (the tick is at or past the armed expiration, aiowheel._time._driver's Driver.due_by), and
 * the callback is callable (else the slow path's checks). The heap runs a timer at its exact
 * deadline, the wheel at its tick: on the heap it could run before a wheel timer of the same
 * deadline or an earlier one (aiowheel._loopmode._loopcalls). */
static inline int
joins_wheel(CoreObject *c, double when, PyObject *callback)
{
    return tick_for(c, when) >= c->armed && Py_TYPE(callback)->tp_call != NULL;
}

/* `res`, the handle just filed for `callback`: if `callback` is an asyncio.timeout's expiry (a
 * bound method of Timeout._on_timeout), its Timeout is noted in the driver's index of the
 * timeouts guarding each task (aiowheel._time._observe.Guards.note_timeout, as
 * note_guard(timeout)); one type test for every other callback. The handle is filed whatever the note does: a note that fails (memory) is
 * reported to sys.unraisablehook and leaves the index without it, never the timer unfiled. */
static inline PyObject *
noted(CoreObject *c, PyObject *callback, PyObject *res)
{
    if (Py_IS_TYPE(callback, &PyMethod_Type) &&
        PyMethod_GET_FUNCTION(callback) == c->state->guarded_at && res != NULL &&
        res != Py_NotImplemented && c->note_guard != NULL) {
        PyObject *done = PyObject_CallOneArg(c->note_guard, PyMethod_GET_SELF(callback));
        if (done == NULL) {
            PyErr_WriteUnraisable(c->note_guard);
        }
        else {
            Py_DECREF(done);
        }
    }
    return res;
}

static PyObject *
core_call_at(CoreObject *c, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *context;
    double when, now;
    if (nargs < 2 || !c->fast || !read_context(c->state, kwnames, args, nargs, &context) ||
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
            return noted(c, args[1], res);
        }
        Py_DECREF(res); /* beyond the core's grid: the driver's wheel, through the slow path */
        goto slow;
    }
    if (ahead == ahead) { /* near, and not NaN: the loop's heap, unless the wheel's order */
        if (ahead > 0 && joins_wheel(c, when, args[1])) {
            PyObject *res = core_file_locked(c, when, args[1], args + 2, nargs - 2, context);
            if (res != Py_NotImplemented) {
                return noted(c, args[1], res);
            }
            Py_DECREF(res);
            goto slow;
        }
        if (c->near_pad && ahead > 0) {
            PyObject *delay = PyFloat_FromDouble(ahead + c->near_pad);
            if (delay == NULL) {
                return NULL;
            }
            PyObject *res = hand_over(c->state, c->near_call_later, delay, args, nargs, context);
            Py_DECREF(delay);
            return res;
        }
        return hand_over(c->state, c->near_call_at, args[0], args, nargs, context);
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
    if (nargs < 2 || !c->fast || !read_context(c->state, kwnames, args, nargs, &context) ||
        !as_seconds(args[0], &delay) || foreign_thread(c) || args[1] == c->state->guarded_later) {
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
        Py_DECREF(res); /* beyond the core's grid: the driver's wheel, through the slow path */
        goto slow;
    }
    if (delay == delay) {
        if (delay > 0) {
            if (core_now(c, &now) < 0) {
                return NULL;
            }
            if (joins_wheel(c, now + delay, args[1])) {
                PyObject *res = core_file_locked(c, now + delay, args[1], args + 2, nargs - 2,
                                                 context);
                if (res != Py_NotImplemented) {
                    return res;
                }
                Py_DECREF(res);
                goto slow;
            }
        }
        if (c->near_call_later == NULL) {
            /* asyncio's call_later is call_at(self.time() + delay): here, without its Python
             * frame and without coming back through call_at (through them the near lane ran
             * slower than asyncio's own; fast only outside debug mode, so there is no source
             * traceback to trim as asyncio's call_later does). `now` is read above when
             * the delay is positive. */
            if (!(delay > 0) && core_now(c, &now) < 0) {
                return NULL;
            }
            PyObject *when = PyFloat_FromDouble(now + delay + (delay > 0 ? c->near_pad : 0.0));
            if (when == NULL) {
                return NULL;
            }
            PyObject *res = hand_over(c->state, c->near_call_at, when, args, nargs, context);
            Py_DECREF(when);
            return res;
        }
        if (c->near_pad && delay > 0) {
            PyObject *padded = PyFloat_FromDouble(delay + c->near_pad);
            if (padded == NULL) {
                return NULL;
            }
            PyObject *res = hand_over(c->state, c->near_call_later, padded, args, nargs, context);
            Py_DECREF(padded);
            return res;
        }
        return hand_over(c->state, c->near_call_later, args[0], args, nargs, context);
    }
slow:
    if (c->slow_call_later == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "aiowheel: this core routes no loop's calls");
        return NULL;
    }
    return PyObject_Vectorcall(c->slow_call_later, args, nargsf, kwnames);
}


/* update(fast, debug, thread_id): what the driver lets the router do (Driver._sync, through
 * Store.sync). */
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
 * make call_at / call_later a loop-mode loop's (aiowheel._loopmode._loopcalls.LoopCalls' routing). */
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

/* note_guards(note): from now on, note(timeout) is told of each asyncio.timeout whose expiry
 * call_at files here (the driver's Guards.note_timeout, once something asked for a task's
 * deadline); None: nothing is (the start: a loop nobody asks pays one pointer test). */
static PyObject *
core_note_guards(CoreObject *c, PyObject *note)
{
    Py_XSETREF(c->note_guard, note == Py_None ? NULL : Py_NewRef(note));
    Py_RETURN_NONE;
}


/* -- loop_setattr: a loop-mode class's __setattr__ -------------------------------------------
 *
 * A loop-mode loop watches one attribute name: ``time`` replaced on the instance (a test's
 * fake clock) moves the driver and the base heap onto it (aiowheel._loopmode._loopstate's _follow_time). As a
 * Python __setattr__ that was a frame and a super() lookup on every attribute the base loop
 * sets, and asyncio sets one on every cancel of a handle on its heap (_timer_cancelled_count),
 * which made loop mode's near timers slower than asyncio's own. This is the same method in C: a
 * method descriptor (so the class's slot calls it with the instance, without a frame) doing
 * object.__setattr__ and calling the watchers of ``time`` and of a plain list set as
 * ``_scheduled`` only. Used where the base loop's own
 * __setattr__ is object's (asyncio, uvloop, rloop and zuvloop's). */

/* aiowheel._loopmode._loopstate.time_replaced, set by watch_time() at aiowheel._loopmode._loop's import. A process-wide
 * global, not module state: the descriptor is called as a class's __setattr__ with the
 * instance, the name and the value, and none of the three leads to this module without a
 * lookup on every attribute a loop sets. Written once at import, read after. */
static PyObject *g_time_replaced = NULL;
/* aiowheel._loopmode._scheduled.replaced, set by watch_scheduled() (scheduled.c): a plain list set as
 * ``_scheduled`` (asyncio's rebuild of its heap) is made the loop's heap type again. */
static PyObject *g_scheduled_replaced = NULL;

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
    if (g_scheduled_replaced != NULL && PyList_CheckExact(args[1]) && PyUnicode_Check(name) &&
        PyUnicode_CompareWithASCIIString(name, "_scheduled") == 0) {
        return PyObject_CallOneArg(g_scheduled_replaced, self);
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
