"""A pytest plugin that runs every asyncio test of a suite on loop mode, opted into per run::

    pytest -p aiowheel.pytest                          # asyncio's default loop as the base
    pytest -p aiowheel.pytest --aiowheel-base uvloop   # or rloop, zuvloop, auto
    pytest -p aiowheel.pytest --aiowheel-strict        # fail asyncio tests left off loop mode
    pytest -p aiowheel.pytest --aiowheel-clock virtual # every asyncio test on a virtual clock
    pytest -p aiowheel.pytest --aiowheel-lingering error  # fail a test that leaves a timer
    pytest -p aiowheel.pytest --aiowheel-every-loop    # the loops tests make, on loop mode too
    pytest -p aiowheel.pytest --aiowheel-max-batch 64  # at most 64 due callbacks an iteration

Nothing in the suite changes, and nothing a test sees changes but its event loop:

- **pytest-asyncio** (1.4+) tests run on loop-mode loops through its public
  ``pytest_asyncio_loop_factories`` hook (one factory, so test ids do not change).
- **anyio** tests (anyio's own pytest plugin) on the asyncio backend get a loop-mode
  ``loop_factory`` where anyio makes its test runner, whatever gives the test its backend:
  anyio's default ``anyio_backend`` fixture, a conftest fixture (parametrized or constant),
  ``parametrize("anyio_backend", ...)``, or a marker a conftest adds during collection. The
  ``anyio_backend`` and ``anyio_backend_options`` values a test or fixture reads stay exactly
  its own: ``anyio_backend == "asyncio"`` is still true. ``use_uvloop=True`` makes uvloop the
  base, as it makes uvloop the loop without the plugin.
- trio tests run unchanged.

Left on their own loops, and said so: a test whose backend names its own ``loop_factory``,
and pytest-asyncio tests whose loop factories come from the suite's own
``pytest_asyncio_loop_factories`` hook (a conftest's hook is asked first and wins). The run
ends with one line saying how many tests ran on loop mode, on which base, and how many were
left off and why; ``--aiowheel-strict`` makes each asyncio test left off fail, for suites that
want every one on the wheel.

Loops the tests make themselves (``asyncio.run`` in a plain test or a ``unittest`` case, a test
client's blocking portal) are counted: the line ends with how many tests ran on a loop the
plugin did not make, "N on their own stock loops" (tests already counted as left off are not
counted again). ``--aiowheel-every-loop`` (ini: ``aiowheel_every_loop = true``) makes those
loops loop-mode loops of the same base, on the real clock: every loop ``asyncio.run``,
``asyncio.Runner``, ``asyncio.new_event_loop``, ``anyio.run`` and anyio's blocking portals make,
through ``asyncio.new_event_loop``, without the event loop policy (see
:class:`~aiowheel._plugin._loops.Loops`).

Lingering timers. ``--aiowheel-lingering error`` (or ``warn``) fails (or warns about) each
test that leaves a timer pending on its loop-mode loop once its fixtures are torn down, naming
each timer's kind and the line that filed it (origin tracking is on for those loops); a loop
shared by several tests reports to each test only the timers it left (what a wider fixture
filed while the test was set up is the fixture's). ``asyncio.run``, a
test runner or a fixture that cancels the test's tasks takes their sleeps and timeouts with
them: what lingers is a timer nothing will cancel (a ``call_later``, a heartbeat).
``warn`` issues :class:`aiowheel.LingeringTimerWarning` (also importable from here, the same
class), and never fails a test: a suite's ``filterwarnings = error`` (or ``-W error``) does not
turn it into an error, ``-W ignore::aiowheel.LingeringTimerWarning`` silences it. Filters name
it as ``aiowheel.LingeringTimerWarning``, which imports only the package. (PYTEST_DONT_REWRITE:
pytest leaves this module's asserts as they are, so a filter naming the older
``aiowheel.pytest.LingeringTimerWarning``, which imports this module before ``-p`` loads it,
draws no ``PytestAssertRewriteWarning`` either.)

Virtual time (:mod:`aiowheel.testing`). ``--aiowheel-clock virtual`` puts every asyncio test
that the plugin switches on a virtual clock: each test's loop starts at 0 (a loop shared by
several tests keeps one clock, which never goes back), and sleeps and timeouts take no wall
time. Per test, whatever the option: ``@pytest.mark.aiowheel_clock("virtual")`` (keywords
``autojump`` and ``start``, as :func:`aiowheel.testing.virtual_loop_factory` takes them) or
``@pytest.mark.aiowheel_clock("real")``. A test that asks for the ``aiowheel_clock`` fixture
runs on a virtual clock unless marked real, and gets a :class:`Clock` (``now``,
``await advance(seconds)``) for the loop it runs on.

Fuzzing time (:mod:`aiowheel.testing`, ``seed=``). ``--aiowheel-seed N`` runs every asyncio
test the plugin switches on a virtual clock fuzzed with seed N: each jump to a timer lands up to
``--aiowheel-jitter`` seconds late (default: 3 ticks), and with ``--aiowheel-stall-rate`` above
0 the loop stalls after a pass of timers for up to ``--aiowheel-stall`` seconds.
``--aiowheel-fuzz K`` runs each such test under K seeds (N, N+1, ... from ``--aiowheel-seed``,
else from 0), stopping at the first that fails; the failure says its seed and the command that
replays it, and the run ends with one line per failing seed. ``@pytest.mark.aiowheel_fuzz(K,
jitter=..., stall_rate=..., stall=...)`` does the same for one test (under ``--aiowheel-seed``
alone: the one seed, a replay). ``--aiowheel-check-determinism`` runs each test twice per seed
and fails it where the two runs' traces (the virtual time and origin of every timer due)
part, with both runs' context. The repeated runs are whole runs of the test (setup, call,
teardown), as pytest-rerunfailures makes them; a test marked ``aiowheel_clock("real")`` is
never fuzzed.

Bounding the due batch. ``--aiowheel-max-batch N`` (ini: ``aiowheel_max_batch = N``) gives
every loop-mode loop the plugin makes, on the real clock or a virtual one (the every-loop ones
too), the ``max_batch`` of :func:`aiowheel.loop_factory`: at most N due wheel callbacks run per
loop iteration, the rest over the next ones, as a server with that setting runs them. A
virtual clock stays at their deadline while they wait. The option wins over the ini value;
``none`` is no bound (the default).

What differs on loop mode is the loop's class: ``type(loop)`` is a loop-mode subclass of the
base (``isinstance(loop, uvloop.Loop)`` holds under ``--aiowheel-base uvloop``), defined in
``aiowheel._loopmode._loop``, so a check of ``type(loop).__module__`` no longer reads ``"uvloop"``.
That is deliberate: the class is not uvloop's, and a suite that tells loops apart should ask
``isinstance`` (or ``aiowheel.config_of(loop)``).

How anyio is reached: anyio's plugin makes every runner, for tests and async fixtures alike,
through ``anyio.pytest_plugin.get_runner(backend_name, backend_options)``; this plugin wraps
that function for the run (and puts it back at the end), adding the ``loop_factory`` to the
options it passes on, never to the values the test holds. (0.4 rewrote the test's own
``anyio_backend`` value instead: tests saw a changed parameter, and backends a conftest marked
late were missed.)

This module holds what pytest finds in a plugin (its hooks, the ``aiowheel_clock`` fixture)
and hands each job to a room of its own: the options and markers (``aiowheel._plugin._options``),
the loop-mode factories and which one each test gets (``aiowheel._plugin._factories``), fuzzing
time (``aiowheel._plugin._fuzz``), the lingering-timer check (``aiowheel._plugin._lingering``),
the loops the tests make themselves (``aiowheel._plugin._loops``) and the run's count
(``aiowheel._plugin._tally``).
"""

from ._plugin._hooks import (
    CLOCKS,
    LINGERING,
    Clock,
    LingeringTimerWarning,
    aiowheel_clock,
    pytest_addoption,
    pytest_asyncio_loop_factories,
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_load_initial_conftests,
    pytest_report_header,
    pytest_runtest_call,
    pytest_runtest_protocol,
    pytest_runtest_setup,
    pytest_runtest_teardown,
    pytest_terminal_summary,
    pytest_unconfigure,
    summary_line,
)

__all__ = [
    "CLOCKS",
    "LINGERING",
    "Clock",
    "LingeringTimerWarning",
    "aiowheel_clock",
    "pytest_addoption",
    "pytest_asyncio_loop_factories",
    "pytest_collection_modifyitems",
    "pytest_configure",
    "pytest_load_initial_conftests",
    "pytest_report_header",
    "pytest_runtest_call",
    "pytest_runtest_protocol",
    "pytest_runtest_setup",
    "pytest_runtest_teardown",
    "pytest_terminal_summary",
    "pytest_unconfigure",
    "summary_line",
]
