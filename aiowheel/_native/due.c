/* aiowheel/_native/due.c: advancing the Core to now, and running a due batch.
 *
 * core_advance mirrors the loop over the wheel's due entries in Driver._advance
 * (aiowheel/_driver.py): the wheel advanced to the tick the driver computed, the due entries
 * in deadline order, one a hair early (float rounding) filed again from its exact deadline,
 * the first tick and the largest lateness reported. core_run mirrors aiowheel/_dispatch.py's
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
 * - Both passes ask the memory for the handle a few places ahead (prefetch_handle).
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
        uintptr_t last_seq = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            double when = due.items[i]->when;
            if (when < last || (when == last && due.items[i]->seq < last_seq)) {
                if (stable_sort(due.items, n, 1) < 0) {
                    goto fail;
                }
                break;
            }
            last = when;
            last_seq = due.items[i]->seq;
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
 * KeyboardInterrupt the rest runs on the loop's next iteration (aiowheel._dispatch.run_batch).
 * Each handle that has run is replaced by None in the batch (the driver drops it after). */
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
        if (Py_TYPE(item) != c->state->handle_type) {
            PyErr_SetString(PyExc_TypeError, "run() takes a list of handles");
            Py_DECREF(batch);
            return NULL;
        }
        Py_INCREF(item);
        int status = handle_run(c->state, (HandleObject *)item);
        if (i < PyList_GET_SIZE(batch) && PyList_GET_ITEM(batch, i) == item) {
            /* Out of the batch as soon as it has run: a handle the batch held last is freed
             * here, while its cache lines are still in the cache (freed by the batch's own
             * dealloc after the last run, each handle of a large batch would be read from
             * memory a second time). */
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
    Py_DECREF(batch);
    Py_RETURN_NONE;
}
