/* aiowheel/_time/_native/clock.c: a Core's time. Reading the driver's clock, a deadline's tick,
 * the driver's wake-up, and moving onto another clock.
 *
 * Mirrors the clock side of aiowheel/_time/_driver.py's Driver: the tick of a deadline
 * (aiowheel/_time/_grid.py's Grid.tick_for: ceil((when - epoch) * inverse * SHRINK - slack)), the wake-up the
 * driver arms (Driver._arm, through aiowheel/_time/_reaper.py: the Core only asks for it, when a
 * bucket earlier than the armed expiration is queued), and Driver.use_clock's re-filing of
 * every pending timer on a new epoch (rebase). Where it differs, on purpose:
 *
 * - Where the driver's clock is time.monotonic the Core reads CLOCK_MONOTONIC itself
 *   (core_now), converted as CPython's time.monotonic converts it (the same float, bit for
 *   bit), instead of calling the function; any other clock (another loop's time, a replaced
 *   loop.time, the virtual clock) is called as the driver calls it. "Now" is never cached.
 * - Ticks are int64: a deadline's tick is clamped to [PAST_TICK, NEVER_TICK] (the driver's
 *   are Python ints).
 * - The armed expiration is a mirror the driver keeps up to date (set_armed), not the driver's
 *   own state.
 */

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
         * then exact too, so one float division gives the same bits without the 64-bit
         * modulo, a slow instruction on the path of every call_later. */
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

/* The grid starts at `epoch` (aiowheel._time._grid's Grid.start and Grid.rebase): the slack of the
 * rounding up grows with the epoch's float spacing. */
static inline void
core_set_epoch(CoreObject *c, double epoch)
{
    c->epoch = epoch;
    c->slack = TICK_EPSILON + TICK_ULPS * fabs(epoch) * c->inv_tick;
}

/* The tick of a deadline, as aiowheel._time._grid's Grid.tick_for computes it (the same float
 * operations, so the same tick: setup.py builds without fused multiply-add), clamped to the
 * int64 grid. */
static inline int64_t
tick_for(CoreObject *c, double when)
{
    double t = ceil((when - c->epoch) * c->inv_tick * TICK_SHRINK - c->slack);
    if (t >= (double)NEVER_TICK) {
        return NEVER_TICK;
    }
    if (!(t >= (double)PAST_TICK)) {
        return PAST_TICK;
    }
    return (int64_t)t;
}

/* The driver's arm, if the handle of deadline `when` just filed queued a bucket earlier than
 * the armed one, or (an exact clock: the virtual one, whose wake-up is at the earliest exact
 * deadline, aiowheel/_time/_reaper.py's Reaper.arm) is due before the armed wake-up. */
static int
core_arm_if_earlier(CoreObject *c, int64_t queued, double when)
{
    if (queued < 0) {
        return -1; /* memory error */
    }
    if ((queued < c->armed || when < c->exact_at) && c->arm != NULL) {
        PyObject *res = PyObject_CallNoArgs(c->arm);
        if (res == NULL) {
            return -1;
        }
        Py_DECREF(res);
    }
    return 0;
}


/* rebase(epoch): the driver's clock changed (aiowheel._time._driver.Driver.use_clock): every
 * pending handle is filed again by its deadline on the new epoch, in deadline order. */
static PyObject *
core_rebase(CoreObject *c, PyObject *arg)
{
    double epoch = PyFloat_AsDouble(arg);
    if (epoch == -1.0 && PyErr_Occurred()) {
        return NULL;
    }
    harray out = {NULL, 0, 0};
    if (wheel_drain(c, &out) < 0 || stable_sort(out.items, out.len) < 0) {
        core_set_epoch(c, epoch);
        for (Py_ssize_t i = 0; i < out.len; i++) {
            wheel_insert(c, out.items[i], tick_for(c, out.items[i]->when));
        }
        PyMem_Free(out.items);
        return NULL;
    }
    core_set_epoch(c, epoch);
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

/* set_armed(expiration, exact_at=-inf): the driver's armed expiration, and on an exact clock
 * the time its wake-up is filed at (aiowheel._time._reaper.Reaper._set_armed). */
static PyObject *
core_set_armed(CoreObject *c, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "set_armed(expiration, exact_at=-inf)");
        return NULL;
    }
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(args[0], &overflow);
    if (v == -1 && PyErr_Occurred()) {
        return NULL;
    }
    double exact_at = -INFINITY;
    if (nargs == 2) {
        exact_at = PyFloat_AsDouble(args[1]);
        if (exact_at == -1.0 && PyErr_Occurred()) {
            return NULL;
        }
    }
    c->armed = overflow > 0 ? INT64_MAX : overflow < 0 ? INT64_MIN : v;
    c->exact_at = exact_at;
    Py_RETURN_NONE;
}
