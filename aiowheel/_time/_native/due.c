/* aiowheel/_time/_native/due.c: advancing the Core to now, and running a due batch.
 *
 * core_advance mirrors the loop over the wheel's due entries in Driver._advance
 * (aiowheel/_time/_driver.py): the wheel advanced to the tick the driver computed, the due entries
 * in deadline order, one a hair early (float rounding) filed again from its exact deadline,
 * the first tick and the largest lateness reported. core_run mirrors aiowheel/_time/_dispatch.py's
 * _run_ready: a batch run in order as one loop callback, the rest handed to the loop's next
 * iteration on SystemExit or KeyboardInterrupt. Where it differs, on purpose:
 *
 * - Nothing is fired here: a due handle is marked DISPATCHED and handed back in a list, which
 *   the driver merges with its own wheel's batch by deadline and queues (Driver._advance fires
 *   each entry itself, with an exception handler per entry; a handle cannot fail to be
 *   dispatched).
 * - The driver computes the tick (with its wake-up correction) and passes it in; a tick
 *   before the last one processed raises ValueError here, where the driver just returns.
 * - core_run takes only handles, and replaces each by None in the batch once it has run (it is
 *   freed while still in the cache); its continuation calls Core.run again.
 * - The walk over the wheel's due chains (wheel_advance, due_take) reads all it needs of a
 *   handle and marks it DISPATCHED as it meets it; the sort and the list read only the
 *   pass's (deadline, stamp, handle) array. core_run asks the memory for the handle a few
 *   places ahead (prefetch_handle).
 */

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

/* A pass's two arrays (the batch, the sort's other half) come from the module state and go
 * back to it (GIL builds): a fresh array for each large batch cost more than the sort itself
 * (the allocator hands memory that large back to the system, and each page of it faulted in
 * again on the next batch's first touch). */
static void
duepass_borrow(CoreState *st, duepass *p, karray *tmp)
{
#ifndef Py_GIL_DISABLED
    p->due = st->scratch[0];
    *tmp = st->scratch[1];
    st->scratch[0] = st->scratch[1] = (karray){NULL, 0, 0};
#else
    (void)st, (void)p, (void)tmp;
#endif
    p->due.len = 0;
}

static void
duepass_free(CoreState *st, duepass *p, karray *tmp)
{
#ifndef Py_GIL_DISABLED
    karray *keep[2] = {&p->due, tmp};
    for (int i = 0; i < 2; i++) {
        if (keep[i]->cap <= SCRATCH_MAX && st->scratch[i].items == NULL) {
            st->scratch[i] = *keep[i];
            keep[i]->items = NULL;
        }
    }
#else
    (void)st;
#endif
    PyMem_Free(tmp->items);
    PyMem_Free(p->due.items);
    PyMem_Free(p->early.items);
}

/* Every handle of the pass back into the elapsed tick's bucket (due at the next advance), on
 * a memory error: nothing is lost. */
static void
due_put_back(CoreObject *c, duepass *p)
{
    for (Py_ssize_t i = 0; i < p->due.len; i++) {
        wheel_insert(c, p->due.items[i].h, c->elapsed);
    }
    for (Py_ssize_t i = 0; i < p->early.len; i++) {
        wheel_insert(c, p->early.items[i], c->elapsed);
    }
}

/* advance(now_tick, now, pass_floor, lateness) -> (due list | None, fired, first tick,
 * lateness): Driver._advance's loop over the wheel's due entries, for handles. */
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
    duepass p = {0};
    p.now = PyFloat_AsDouble(args[1]);
    p.floor_ = PyFloat_AsDouble(args[2]);
    p.lateness = PyFloat_AsDouble(args[3]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    if (now_tick < c->elapsed) {
        PyErr_Format(PyExc_ValueError, "time cannot go backwards: now=%lld < elapsed=%lld",
                     now_tick, (long long)c->elapsed);
        return NULL;
    }
    PyObject *list = NULL;
    karray tmp = {NULL, 0, 0};
    duepass_borrow(c->state, &p, &tmp);
    if (wheel_advance(c, now_tick, &p) < 0) {
        goto fail;
    }
    /* Not due after all (float rounding put them a hair early): filed again from their exact
     * deadlines. */
    for (Py_ssize_t i = 0; i < p.early.len; i++) {
        HandleObject *h = p.early.items[i];
        int64_t tick = tick_for(c, h->when);
        if (tick <= now_tick) {
            tick = now_tick + 1;
        }
        wheel_insert(c, h, tick < NEVER_TICK ? tick : NEVER_TICK - 1);
    }
    p.early.len = 0;
    Py_ssize_t n = p.due.len;
    keyed *sorted = p.due.items;
    if (n > 1) {
        sorted = sort_keyed(p.due.items, n, &tmp);
        if (sorted == NULL) {
            goto fail;
        }
    }
    if (n) {
        list = PyList_New(n);
        if (list == NULL) {
            goto fail;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyList_SET_ITEM(list, i, (PyObject *)sorted[i].h);
        }
    }
    else {
        list = Py_NewRef(Py_None);
    }
    duepass_free(c->state, &p, &tmp);
    return Py_BuildValue("(NnLd)", list, n, (long long)p.first_tick, p.lateness);
fail:
    due_put_back(c, &p);
    duepass_free(c->state, &p, &tmp);
    return NULL;
}

/* run(batch): run a batch of due handles, in order, as one loop callback; on SystemExit or
 * KeyboardInterrupt the rest runs on the loop's next iteration (aiowheel._time._dispatch.run_batch).
 * Each handle that has run is replaced by None in the batch (the driver drops it after). */
static PyObject *
core_run(CoreObject *c, PyObject *batch)
{
    if (!PyList_CheckExact(batch)) {
        PyErr_SetString(PyExc_TypeError, "run() takes a list of handles");
        return NULL;
    }
    Py_INCREF(batch);
    held_t held = {NULL, 0}; /* the context the batch's runs from an empty context share */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(batch); i++) {
        if (i + PREFETCH_AHEAD < PyList_GET_SIZE(batch)) {
            prefetch_handle(PyList_GET_ITEM(batch, i + PREFETCH_AHEAD));
        }
        PyObject *item = PyList_GET_ITEM(batch, i);
        if (Py_TYPE(item) != c->state->handle_type) {
            held_leave(c->state, &held);
            PyErr_SetString(PyExc_TypeError, "run() takes a list of handles");
            Py_DECREF(batch);
            return NULL;
        }
        Py_INCREF(item);
        int status = handle_run(c->state, (HandleObject *)item, &held);
        if (i < PyList_GET_SIZE(batch) && PyList_GET_ITEM(batch, i) == item) {
            /* Out of the batch as soon as it has run: a handle the batch held last is freed
             * here, while its cache lines are still in the cache (freed by the batch's own
             * dealloc after the last run, each handle of a large batch would be read from
             * memory a second time). */
            PyList_SET_ITEM(batch, i, Py_NewRef(Py_None));
            Py_DECREF(item);
        }
        if (Py_REFCNT(item) > 1) {
            handle_keep((HandleObject *)item); /* held elsewhere after its run */
        }
        Py_DECREF(item);
        if (status < 0) {
            held_leave(c->state, &held);
            Py_ssize_t size = PyList_GET_SIZE(batch);
            if (i + 1 < size) {
#if PY_VERSION_HEX >= 0x030C0000
                PyObject *exc = PyErr_GetRaisedException();
#else
                PyObject *type, *exc, *tb;
                PyErr_Fetch(&type, &exc, &tb);
#endif
                PyObject *rest = PyList_GetSlice(batch, i + 1, size);
                PyObject *loop = rest && c->state->get_running_loop
                                     ? PyObject_CallNoArgs(c->state->get_running_loop)
                                     : NULL;
                PyObject *again = loop ? PyObject_GetAttrString((PyObject *)c, "run") : NULL;
                PyObject *res =
                    again ? PyObject_CallMethodObjArgs(loop, c->state->str_call_soon, again, rest, NULL)
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
    held_leave(c->state, &held);
    Py_DECREF(batch);
    Py_RETURN_NONE;
}
