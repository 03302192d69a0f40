/* aiowheel/_time/_native/scheduled.c: ScheduledHeap, the base of loop._scheduled on loop mode.
 *
 * Mirrors the pure build's _Heap in aiowheel/_loopmode/_scheduled.py (whose docstring is the design: why
 * a list subclass, who counts as the base loop, what its readers see). A list whose length,
 * truth, iteration and `in` are the list's own when the code asking is the base loop's (the
 * calling frame's globals are one of the dicts watch_scheduled() registered: asyncio's
 * base_events), and otherwise those of the list its `_seen()` method returns (every pending
 * timer, the wheel's included); indexing and slicing too (a reader's `_scheduled[0]` is the
 * earliest pending timer, and `_scheduled[:]` every one, never the wheel's wake-up, which a
 * loop that cancels each handle of the slice cancelled: the wheel never woke again). heapq's
 * pushes and pops are list's own, unchanged; the Python subclass answers the few methods a
 * reader may call (clear(), copy()...). Only readers pay, and the base pays one pointer
 * comparison per len(), truth test or `_scheduled[0]`, where a property or a Python __len__
 * would cost a call each.
 *
 * A static type (stateless, like DoneType), subclassed in Python by aiowheel._loopmode._scheduled.Heap,
 * which adds `_seen()` and the slots it reads: its dealloc and GC are list's and CPython's.
 */

/* The dicts of globals whose code sees the real heap (set by watch_scheduled(): process-wide,
 * as g_time_replaced), and the method that lists what any other code sees. */
static PyObject *g_base_globals = NULL; /* a tuple of dicts */
static PyObject *g_str_seen = NULL;

static int
asked_by_base(void)
{
    if (g_base_globals == NULL) {
        return 1; /* not set up: a plain list to everyone */
    }
    PyObject *globals = PyEval_GetGlobals(); /* borrowed; NULL with no Python frame */
    if (globals == NULL) {
        return 0;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(g_base_globals);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyTuple_GET_ITEM(g_base_globals, i) == globals) {
            return 1;
        }
    }
    return 0;
}

/* What a reader sees: self._seen(), a list. */
static PyObject *
seen_by_readers(PyObject *self)
{
    PyObject *seen = PyObject_CallMethodNoArgs(self, g_str_seen);
    if (seen != NULL && !PyList_Check(seen)) {
        PyErr_Format(PyExc_TypeError, "loop._scheduled's readers returned %.200s, not a list",
                     Py_TYPE(seen)->tp_name);
        Py_CLEAR(seen);
    }
    return seen;
}

static Py_ssize_t
heap_length(PyObject *self)
{
    if (asked_by_base()) {
        return PyList_GET_SIZE(self);
    }
    PyObject *seen = seen_by_readers(self);
    if (seen == NULL) {
        return -1;
    }
    Py_ssize_t n = PyList_GET_SIZE(seen);
    Py_DECREF(seen);
    return n;
}

static PyObject *
heap_iter(PyObject *self)
{
    if (asked_by_base()) {
        return PyList_Type.tp_iter(self);
    }
    PyObject *seen = seen_by_readers(self);
    if (seen == NULL) {
        return NULL;
    }
    PyObject *it = PyObject_GetIter(seen);
    Py_DECREF(seen);
    return it;
}

static int
heap_contains(PyObject *self, PyObject *value)
{
    if (asked_by_base()) {
        return PyList_Type.tp_as_sequence->sq_contains(self, value);
    }
    PyObject *seen = seen_by_readers(self);
    if (seen == NULL) {
        return -1;
    }
    int found = PySequence_Contains(seen, value);
    Py_DECREF(seen);
    return found;
}

static PyObject *
heap_subscript(PyObject *self, PyObject *index)
{
    if (asked_by_base()) {
        return PyList_Type.tp_as_mapping->mp_subscript(self, index);
    }
    PyObject *seen = seen_by_readers(self);
    if (seen == NULL) {
        return NULL;
    }
    PyObject *item = PyObject_GetItem(seen, index);
    Py_DECREF(seen);
    return item;
}

/* The rest of each table is list's (PyType_Ready copies what is left NULL from the base). */
static PySequenceMethods heap_as_sequence = {
    .sq_length = heap_length,
    .sq_contains = heap_contains,
};
static PyMappingMethods heap_as_mapping = {
    .mp_length = heap_length,
    .mp_subscript = heap_subscript,
};

static PyTypeObject ScheduledHeapType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "aiowheel._time._core.ScheduledHeap",
    .tp_basicsize = sizeof(PyListObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "A list that is the base loop's timer heap to the base loop's own code, and every "
              "pending timer to its other readers (see aiowheel._loopmode._scheduled).",
    .tp_iter = heap_iter,
    .tp_as_sequence = &heap_as_sequence,
    .tp_as_mapping = &heap_as_mapping,
};

/* watch_scheduled(base_globals, replaced): the tuple of globals dicts whose code sees the
 * real heap, and what loop_setattr calls with the loop when `_scheduled` is set (asyncio
 * replaces its heap by a new list when cancelled handles pile up: made a heap again there). */
static PyObject *
watch_scheduled(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyTuple_Check(args[0]) || !PyCallable_Check(args[1])) {
        return PyErr_Format(PyExc_TypeError,
                            "watch_scheduled() takes a tuple of dicts and a callable");
    }
    PyObject *base_globals = args[0];
    Py_ssize_t n = PyTuple_GET_SIZE(base_globals);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyDict_Check(PyTuple_GET_ITEM(base_globals, i))) {
            return PyErr_Format(PyExc_TypeError, "watch_scheduled() takes a tuple of dicts");
        }
    }
    Py_XSETREF(g_base_globals, Py_NewRef(base_globals));
    Py_XSETREF(g_scheduled_replaced, Py_NewRef(args[1]));
    Py_RETURN_NONE;
}

static int
scheduled_ready(PyObject *m)
{
    ScheduledHeapType.tp_base = &PyList_Type;
    if (g_str_seen == NULL) {
        g_str_seen = PyUnicode_InternFromString("_seen");
        if (g_str_seen == NULL) {
            return -1;
        }
    }
    if (PyType_Ready(&ScheduledHeapType) < 0) {
        return -1;
    }
    return PyModule_AddObjectRef(m, "ScheduledHeap", (PyObject *)&ScheduledHeapType);
}
