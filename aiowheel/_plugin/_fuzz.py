"""The pytest plugin's fuzzing of time (``--aiowheel-seed``, ``--aiowheel-fuzz``,
``--aiowheel-check-determinism``, the ``aiowheel_fuzz`` marker): each fuzzed test run whole
under its seeds, twice per seed under the determinism check, and the failure that names the seed
and the command that replays it.

:class:`Fuzzing` is a plugin object of its own, registered by :mod:`aiowheel.pytest` at
configure: its ``pytest_runtest_protocol`` runs a fuzzed test as pytest-rerunfailures reruns
one (setup, call, teardown each time), and leaves every other test to pytest. The loops of each
run are armed with its seed by :class:`aiowheel._plugin._factories.FuzzableFactory`, through the
run noted on the test (:data:`aiowheel._plugin._factories.RUN`). A room of its own: the seeds,
the reruns and their reports are one protocol, which no other part of the plugin takes part in.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from .._loopmode._testing import first_divergence
from .._virtual._fuzz import DEFAULT_JITTER_TICKS, DEFAULT_STALL, Fuzz
from ._factories import RUN, Run, clock_for
from ._options import FUZZ_MARKER, MARKER, TICK, int_option, number_option

__all__ = ["FUZZING", "Fuzzing", "Plan"]


class Plan:
    """How one test is fuzzed: its seeds, its settings, whether its determinism is checked."""

    __slots__ = ("check", "fuzz", "seeds")

    def __init__(self, seeds: range, fuzz: Fuzz, check: bool) -> None:
        self.seeds = seeds
        self.fuzz = fuzz
        self.check = check


class Fuzzing:
    """The fuzzing options of a run, and the protocol that runs a fuzzed test under its seeds
    (a plugin object, registered at configure)."""

    def __init__(
        self,
        seed: int | None,
        count: int | None,
        check: bool,
        settings: dict[str, float],
    ) -> None:
        self.seed = seed
        self.count = count
        self.check = check
        self.settings = settings  # the options given: jitter, stall_rate, stall
        self.everywhere = seed is not None or count is not None or check
        self.failing: list[str] = []

    @classmethod
    def from_options(cls, config: pytest.Config) -> Fuzzing:
        """Read and check the options (a usage error naming the bad one)."""

        def option(name: str) -> str | None:
            value = config.getoption(name.replace("-", "_"))
            return None if value is None else str(value)

        try:
            seed = int_option("--aiowheel-seed", option("aiowheel-seed"), 0)
            count = int_option("--aiowheel-fuzz", option("aiowheel-fuzz"), 1)
            settings = {}
            for name, key, most in (
                ("jitter", "jitter", None),
                ("stall-rate", "stall_rate", 1.0),
                ("stall", "stall", None),
            ):
                text = option(f"aiowheel-{name}")
                if text is not None:
                    settings[key] = number_option(f"--aiowheel-{name}", text, most)
        except (TypeError, ValueError) as exc:
            raise pytest.UsageError(f"aiowheel.pytest: {exc}") from None
        check = bool(config.getoption("aiowheel_check_determinism"))
        fuzzing = cls(seed, count, check, settings)
        if fuzzing.everywhere and config.getoption("aiowheel_clock") == "real":
            given = "--aiowheel-seed" if seed is not None else "--aiowheel-fuzz"
            if seed is None and count is None:
                given = "--aiowheel-check-determinism"
            raise pytest.UsageError(
                f"aiowheel.pytest: {given} fuzzes the virtual clock, and --aiowheel-clock real "
                "asks for the real one: drop --aiowheel-clock real (the seed puts every asyncio "
                "test on a virtual clock), or mark the tests that need real time "
                "@pytest.mark.aiowheel_clock('real')"
            )
        return fuzzing

    def describe(self) -> str:
        """The run's fuzzing, for the report header."""
        first = self.seed or 0
        seeds = (
            f"seed {first}" if self.count is None else f"seeds {first}..{first + self.count - 1}"
        )
        check = ", each run twice (determinism check)" if self.check else ""
        settings = "".join(f", {k} {v:g}" for k, v in self.settings.items())
        return f"fuzzed: {seeds}{settings}{check}"

    def plan(self, item: pytest.Item) -> Plan | None:
        """How ``item`` is fuzzed; None if it is not (a usage error for a bad marker)."""
        marker = item.get_closest_marker(FUZZ_MARKER)
        if marker is None and not self.everywhere:
            return None
        if clock_for(item) is None:
            if marker is not None:
                raise pytest.UsageError(
                    f"{item.nodeid}: @pytest.mark.{FUZZ_MARKER} fuzzes the virtual clock, and "
                    f"the test is marked {MARKER}('real')"
                )
            return None
        settings = dict(self.settings)
        count = self.count
        if marker is not None:
            try:
                if len(marker.args) > 1 or set(marker.kwargs) - {
                    "k",
                    "jitter",
                    "stall_rate",
                    "stall",
                }:
                    raise TypeError("takes k and the keywords jitter, stall_rate and stall")
                k = marker.args[0] if marker.args else marker.kwargs.get("k", 10)
                if count is None and self.seed is None:
                    count = int_option("k", k, 1)
                for key in ("jitter", "stall_rate", "stall"):
                    if marker.kwargs.get(key) is not None:
                        settings[key] = marker.kwargs[key]
                fuzz = self._fuzz(0, settings)
            except (TypeError, ValueError) as exc:
                raise pytest.UsageError(
                    f"{item.nodeid}: @pytest.mark.{FUZZ_MARKER}: {exc}"
                ) from None
        else:
            fuzz = self._fuzz(0, settings)
        first = self.seed or 0
        return Plan(range(first, first + (count or 1)), fuzz, self.check)

    @staticmethod
    def _fuzz(seed: int, settings: Mapping[str, object]) -> Fuzz:
        return Fuzz.checked(
            seed,
            settings.get("jitter", DEFAULT_JITTER_TICKS * TICK),
            settings.get("stall_rate", 0.0),
            settings.get("stall", DEFAULT_STALL),
        )

    def replay(self, item: pytest.Item, fuzz: Fuzz) -> str:
        """The command line that replays ``item`` under ``fuzz``."""
        options = "".join(
            f" --aiowheel-{key.replace('_', '-')} {value:g}" for key, value in self.settings.items()
        )
        check = " --aiowheel-check-determinism" if self.check else ""
        return (
            f"pytest -p aiowheel.pytest '{item.nodeid}' --aiowheel-seed {fuzz.seed}{options}{check}"
        )

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> bool | None:
        """Run a fuzzed test under each of its seeds (twice each under the determinism check),
        whole runs, until one fails; report that one (or the last), with its seed."""
        plan = self.plan(item)
        if plan is None:
            return None
        from _pytest.runner import runtestprotocol

        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        reports: list[pytest.TestReport] = []
        try:
            for seed in plan.seeds:
                fuzz = Fuzz(seed, plan.fuzz.jitter, plan.fuzz.stall_rate, plan.fuzz.stall)
                traces = []
                for again in range(2 if plan.check else 1):
                    first = seed == plan.seeds[0] and not again
                    run = item.stash[RUN] = Run(fuzz, plan.check, first)
                    reports = runtestprotocol(item, nextitem=nextitem, log=False)
                    if any(report.failed for report in reports):
                        self._failed(item, fuzz, reports, "fails")
                        return True
                    if any(report.skipped for report in reports):
                        return True  # skipped (or xfailed): one run says it
                    traces.append(run.trace())
                if plan.check:
                    where = first_divergence(*traces)
                    if where is not None:
                        self._diverged(item, fuzz, reports, where)
                        return True
            return True
        finally:
            del item.stash[RUN]
            for report in reports:
                item.ihook.pytest_runtest_logreport(report=report)
            item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)

    def _failed(
        self, item: pytest.Item, fuzz: Fuzz, reports: list[pytest.TestReport], what: str
    ) -> None:
        replay = self.replay(item, fuzz)
        line = f"aiowheel: seed {fuzz.seed} {what} {item.nodeid}; replay: {replay}"
        self.failing.append(line)
        for report in reports:
            if report.failed:
                report.sections.append(
                    ("aiowheel fuzzing", f"seed {fuzz.seed} {what} this test; replay it with\n"
                     f"  {replay}")
                )  # fmt: skip

    def _diverged(
        self, item: pytest.Item, fuzz: Fuzz, reports: list[pytest.TestReport], where: str
    ) -> None:
        call = next((report for report in reports if report.when == "call"), reports[-1])
        call.outcome = "failed"
        call.longrepr = (
            f"aiowheel --aiowheel-check-determinism: seed {fuzz.seed} ran this test twice and "
            f"the runs' timers differ, so a seed cannot replay it: {where}\n"
            "A test runs the same under one seed only if nothing outside the loop decides what "
            "it does: look for threads (to_thread, executors) racing the loop, real I/O "
            "(sockets, files, subprocesses), random or uuid without a seed, the wall clock "
            "(time.time, datetime.now), and iteration over sets of objects (hash order)."
        )
        self._failed(item, fuzz, reports, "is not deterministic in")


FUZZING: pytest.StashKey[Fuzzing] = pytest.StashKey()
"""The run's :class:`Fuzzing`, made at configure."""
