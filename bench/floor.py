"""The floor under ``loop.call_later(30, f)`` + ``cancel()``: what any native timer must pay.

``python -m bench.floor [--rounds N] [--ops N]`` times, in one process with the contenders
alternating over ``--rounds`` rounds (7) on fresh loops, the benchmark loop of ``bench``'s
``schedule`` workload (nothing else pending) with:

- **clock**: one native clock read (``time.monotonic()``) in place of the timer: the floor of
  ``bench``'s own schedule target;
- **stub**: a C function with ``call_later``'s signature that reads ``CLOCK_MONOTONIC``,
  takes an object from a free list (none on a free-threaded build, as the native core keeps
  none there; the stub declares itself free-threading safe) and stores the deadline and the
  callback in it, whose ``cancel()`` returns True: the same calls, the same clock read, the
  same allocation pattern as a native timer, and no timer work at all (no wheel, no heap, no
  context). It is compiled here with the C compiler Python was built with (``sysconfig``'s
  ``CC``), into a temporary folder;
- loop mode on each installed base, and each peer loop's own ``call_later``.

It answers one question: how far can a native ``call_later`` + ``cancel`` be from the fastest
peer's, given what the benchmark loop, the two calls and the clock cost? The stub's time is the
least any implementation can take; what a timer does beyond it is the rest.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiowheel
from aiowheel import loops

OPS_PER_ITERATION = 1000

STUB_SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <time.h>

typedef struct { PyObject_HEAD double when; PyObject *callback; } Stub;
static PyTypeObject StubType;
static Stub *free_list = NULL;

static void stub_dealloc(Stub *s) {
    Py_CLEAR(s->callback);
#ifdef Py_GIL_DISABLED /* no free list there, as the native core keeps none */
    PyObject_Free(s);
#else
    *(Stub **)&s->callback = free_list;
    free_list = s;
#endif
}
static PyObject *stub_cancel(Stub *s, PyObject *unused) { Py_RETURN_TRUE; }
static PyMethodDef stub_methods[] = {
    {"cancel", (PyCFunction)stub_cancel, METH_NOARGS, NULL}, {NULL, NULL, 0, NULL}};
static PyTypeObject StubType = {
    PyVarObject_HEAD_INIT(NULL, 0) .tp_name = "_aiowheel_floor.Stub",
    .tp_basicsize = sizeof(Stub), .tp_dealloc = (destructor)stub_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT, .tp_methods = stub_methods};

static PyObject *call_later(PyObject *m, PyObject *const *args, size_t nargsf, PyObject *kw) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double now = (double)((int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec) / 1e9;
    Stub *s;
    if (free_list != NULL) {
        s = free_list;
        free_list = *(Stub **)&s->callback;
        PyObject_Init((PyObject *)s, &StubType);
    } else {
        s = PyObject_New(Stub, &StubType);
        if (s == NULL) return NULL;
    }
    s->when = now + PyFloat_AsDouble(args[0]);
    s->callback = Py_NewRef(args[1]);
    return (PyObject *)s;
}
static PyMethodDef module_methods[] = {
    {"call_later", (PyCFunction)(void (*)(void))call_later, METH_FASTCALL | METH_KEYWORDS, NULL},
    {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_aiowheel_floor", NULL, -1,
                                    module_methods};
PyMODINIT_FUNC PyInit__aiowheel_floor(void) {
    if (PyType_Ready(&StubType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
#ifdef Py_GIL_DISABLED /* else importing it turns the GIL on for the whole process */
    if (m != NULL && PyUnstable_Module_SetGIL(m, Py_MOD_GIL_NOT_USED) < 0) {
        Py_DECREF(m);
        return NULL;
    }
#endif
    return m;
}
"""


def _noop() -> None:
    pass


def build_stub(folder: Path) -> Any:
    """Compile and import the stub (see the module docstring)."""
    source = folder / "_aiowheel_floor.c"
    source.write_text(STUB_SOURCE)
    target = folder / ("_aiowheel_floor" + sysconfig.get_config_var("EXT_SUFFIX"))
    compiler = (sysconfig.get_config_var("CC") or "cc").split()
    include = sysconfig.get_paths()["include"]
    subprocess.run(
        [*compiler, "-shared", "-fPIC", "-O3", f"-I{include}", str(source), "-o", str(target)],
        check=True,
    )
    spec = importlib.util.spec_from_file_location("_aiowheel_floor", target)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def clock_floor(rounds: int) -> float:
    """ns per iteration of the loop with one native clock read in place of the timer."""
    clock = time.monotonic
    ring: deque[float] = deque([0.0])
    start = time.perf_counter()
    for _ in range(rounds):
        for _ in range(OPS_PER_ITERATION):
            ring.append(clock())
            ring.popleft()
    return (time.perf_counter() - start) / (rounds * OPS_PER_ITERATION) * 1e9


def schedule(make_loop: Callable[[], asyncio.AbstractEventLoop], rounds: int,
             call_later: Callable[..., Any] | None = None) -> float:  # fmt: skip
    """ns per ``call_later(30, f)`` + ``cancel()`` of the oldest, one timer pending."""

    async def main() -> float:
        loop = asyncio.get_running_loop()
        later = call_later or loop.call_later
        ring = deque([later(30.0, _noop)])
        gc.collect()
        start = time.perf_counter()
        for _ in range(rounds):
            for _ in range(OPS_PER_ITERATION):
                ring.append(later(30.0, _noop))
                ring.popleft().cancel()
            await asyncio.sleep(0)
        return (time.perf_counter() - start) / (rounds * OPS_PER_ITERATION) * 1e9

    loop = make_loop()
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def main(argv: list[str] | None = None) -> int:
    """Run the contenders alternating and print median, worst and best (ns per operation)."""
    parser = argparse.ArgumentParser(prog="python -m bench.floor", description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--ops", type=int, default=300_000)
    args = parser.parse_args(argv)
    iterations = max(1, args.ops // OPS_PER_ITERATION)
    contenders: dict[str, Callable[[], float]] = {"clock": lambda: clock_floor(iterations)}
    with tempfile.TemporaryDirectory() as folder:
        stub = build_stub(Path(folder))
        contenders["stub"] = lambda: schedule(
            asyncio.new_event_loop, iterations, call_later=stub.call_later
        )
        for name, base in loops.installed().items():
            own = asyncio.new_event_loop if base is None else base
            contenders[f"loop/{name}"] = lambda own=own: schedule(own, iterations)
            contenders[f"loop-mode/{name}"] = lambda base=base: schedule(
                lambda: aiowheel.new_event_loop(base), iterations
            )
        times: dict[str, list[float]] = {name: [] for name in contenders}
        for _ in range(args.rounds):
            for name, run in contenders.items():
                times[name].append(run())
    print(f"aiowheel {aiowheel.__version__} ({'native core' if aiowheel.NATIVE else 'no core'}),"
          f" Python {sys.version.split()[0]}; ns per call_later + cancel, "
          f"{args.rounds} rounds alternating")  # fmt: skip
    for name, values in sorted(times.items(), key=lambda item: statistics.median(item[1])):
        print(f"  {name:20s} median {statistics.median(values):7.1f}"
              f"   (best {min(values):6.1f}, worst {max(values):6.1f})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
