"""aiowheel.loops: zero-argument factories by base name, and factories that pickle."""

from __future__ import annotations

import asyncio
import importlib.util
import pickle
from typing import Any

import pytest

import aiowheel
import aiowheel.loops
import aiowheel.testing
from aiowheel import timer_of
from aiowheel._common import _bases
from aiowheel._loopmode import _loop, _loops
from aiowheel._virtual import _virtual
from tests.support import BASES, ROOT, run_python

INSTALLED = [
    record.name
    for record in _bases.RECORDS
    if record.module is None or importlib.util.find_spec(record.module) is not None
]


def _make(name: str) -> asyncio.AbstractEventLoop:
    return aiowheel.loops.factory(name)()


@pytest.mark.parametrize("name", INSTALLED)
def test_each_installed_base_makes_a_loop_mode_loop_that_runs(name: str) -> None:
    loop = _make(name)
    try:
        timer = timer_of(loop)
        assert timer is not None
        base = aiowheel.loops.base_class(name)
        if base is not None:
            assert isinstance(loop, base)
        loop.run_until_complete(asyncio.sleep(0.03))  # a wheel timer
        assert timer.stats().fired == 1
    finally:
        loop.close()


@pytest.mark.parametrize("name", INSTALLED)
def test_the_factories_pickle_by_name(name: str) -> None:
    factory = aiowheel.loops.factory(name)
    assert pickle.loads(pickle.dumps(factory)) is factory


def test_auto_prefers_zuvloop_then_uvloop() -> None:
    assert [record.name for record in _bases.AUTO] == ["zuvloop", "uvloop"]
    loop = aiowheel.loops.auto()
    try:
        expected = "zuvloop" if "zuvloop" in INSTALLED else "uvloop"
        assert isinstance(loop, aiowheel.loops.base_class(expected))  # type: ignore[arg-type]
        assert timer_of(loop) is not None
    finally:
        loop.close()


@pytest.mark.bases("asyncio", "uvloop")
def test_loop_factory_pickles_and_its_copy_makes_the_same_loops(base: Any) -> None:
    factory = aiowheel.loop_factory(base, threshold=0.02)
    copy = pickle.loads(pickle.dumps(factory))
    assert copy == factory
    assert hash(copy) == hash(factory)
    loop = copy()
    original = factory()
    try:
        assert type(loop).__base__ is type(original).__base__  # each loop has a class of its own
        timer = timer_of(loop)
        assert timer is not None
        assert aiowheel.config_of(loop) == factory.config
        assert aiowheel.config_of(loop).threshold == 0.02  # type: ignore[union-attr]
    finally:
        loop.close()
        original.close()  # left open, it warned "unclosed event loop" in a later test's gc
    assert "threshold=0.02" in repr(factory)


def test_an_unknown_base_name_is_refused_with_the_known_ones() -> None:
    with pytest.raises(
        ValueError, match=r"^base_class\(\): unknown base loop 'trio'; known: asyncio, uvloop"
    ):
        aiowheel.loops.base_class("trio")


def test_a_missing_base_library_names_the_pip_extra() -> None:
    # A fresh interpreter in which importing rloop fails, as where it is not installed.
    code = (
        "import sys; sys.modules['rloop'] = None\n"
        "import aiowheel.loops\n"
        "try:\n"
        "    aiowheel.loops.rloop()\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    proc = run_python(["-c", code], timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "aiowheel.loops.rloop needs rloop" in out
    assert "pip install 'aiowheel[rloop]'" in out


def test_the_bracio_factory_files_every_deadline_ahead_on_the_wheel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # bracio 0.0.1 runs handles after they are cancelled (each reports "Exception in callback
    # None()"), so its factory leaves no timer on bracio's heap. bracio comes with the bench
    # extra only: a stand-in base here (the real one runs in the test above where installed).
    class StandIn(asyncio.SelectorEventLoop):
        pass

    monkeypatch.setattr(_loops, "base_class", lambda name: StandIn)
    loop = aiowheel.loops.bracio()
    other = aiowheel.loops.zloop()
    try:
        assert isinstance(loop, StandIn)
        config = aiowheel.config_of(loop)
        assert config is not None and config.threshold == 0.0
        near = loop.call_later(0.001, print)  # on the wheel, however near
        assert isinstance(near, aiowheel.TimerHandle)
        near.cancel()
        # The other factories keep the default: a near timer stays on the base's heap.
        other_config = aiowheel.config_of(other)
        assert other_config is not None
        assert other_config.threshold == aiowheel.LoopConfig(StandIn).threshold > 0
        assert not isinstance(other.call_later(0.001, print), aiowheel.TimerHandle)
    finally:
        loop.close()
        other.close()


# -- aiowheel.loops.factory -------------------------------------------------------------------


@pytest.mark.parametrize("record", _bases.RECORDS, ids=lambda record: record.name)
def test_factory_gives_the_function_of_each_base(record: _bases.Base) -> None:
    made = aiowheel.loops.factory(record.name)
    assert made is getattr(aiowheel.loops, record.factory)
    assert made.__name__ == record.factory
    assert record.factory in aiowheel.loops.__all__


def test_factory_of_auto_is_auto() -> None:
    assert aiowheel.loops.factory("auto") is aiowheel.loops.auto
    assert aiowheel.loops.factory("asyncio") is aiowheel.loops.asyncio_loop


def test_factory_refuses_an_unknown_name_naming_it_and_the_known_ones() -> None:
    known = ", ".join([*(record.name for record in _bases.RECORDS), "auto"])
    with pytest.raises(ValueError) as caught:
        aiowheel.loops.factory("asyncio_loop")  # a factory's name, not a base's
    assert str(caught.value) == (f"factory(): unknown base loop 'asyncio_loop'; known: {known}")
    with pytest.raises(TypeError, match=r"^factory\(\): name must be a base loop's name .*got"):
        aiowheel.loops.factory(None)  # type: ignore[arg-type]


def test_factory_imports_no_base_library_until_called() -> None:
    code = (
        "import sys, aiowheel.loops\n"
        "for name in aiowheel.loops.BASES: aiowheel.loops.factory(name)\n"
        "print(sorted(r.module for r in aiowheel._common._bases.RECORDS\n"
        "            if r.module in sys.modules))\n"
    )
    proc = run_python(["-c", code], timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.strip() == "[]"


# -- one record per base (aiowheel._common._bases), and everything reads it
# ---------------------------


def _extras() -> dict[str, list[str]]:
    import tomllib

    with open(ROOT / "pyproject.toml", "rb") as file:
        extras: dict[str, list[str]] = tomllib.load(file)["project"]["optional-dependencies"]
    return extras


@pytest.mark.parametrize("record", _bases.RECORDS, ids=lambda record: record.name)
def test_every_record_is_complete(record: _bases.Base) -> None:
    assert record.name and record.name.isidentifier()
    assert _bases.by_name(record.name) is record
    assert (record.module is None) == (record.name == "asyncio")
    assert record.class_name is None or record.module is not None
    if record.module is not None:
        assert _bases.of_module(record.module) is record
        # the pip extra installs the library, on the Python the record names
        extra = _extras()[record.extra]  # type: ignore[index]
        assert any(requirement.startswith(record.module) for requirement in extra)
        python = [r for r in extra if r.startswith(record.module) and "python_version" in r]
        if record.python is None:
            assert not python
        else:
            assert python and f"python_version >= '{record.python}'" in python[0]
    else:
        assert record.extra is None and record.python is None
    assert isinstance(record.pad, float) and 0.0 <= record.pad <= _bases.UNMEASURED_PAD
    assert record.debug_checks in ("asyncio", "thread")
    assert record.requeue in ("call_soon", "native_call_later", "timer")
    assert record.libuv == (record.requeue == "call_soon")  # libuv: every iteration polls
    assert record.auto_rank is None or record.auto_rank >= 0
    assert isinstance(record.all_on_the_wheel, bool) and isinstance(record.granian, bool)
    assert record.defects and all(isinstance(defect, str) and defect for defect in record.defects)
    assert hasattr(aiowheel.loops, record.factory)


def test_the_records_are_the_bases_and_their_order() -> None:
    names = [record.name for record in _bases.RECORDS]
    assert len(set(names)) == len(names)
    assert {record.name: record.extra for record in _bases.RECORDS} == aiowheel.loops.BASES
    ranks = [record.auto_rank for record in _bases.AUTO]
    assert ranks == sorted(ranks) and len(set(ranks)) == len(ranks)
    # every loop factory of aiowheel.loops is a record's (or auto)
    helpers = {"BASES", "auto", "auto_base", "base_class", "factory", "installed"}
    factories = set(aiowheel.loops.__all__) - helpers
    assert factories == {record.factory for record in _bases.RECORDS}


def _installed_records() -> list[Any]:
    return [
        pytest.param(record, base, id=record.name)
        for record in _bases.RECORDS
        for name, base in BASES.items()
        if name == record.name
    ]


@pytest.mark.parametrize(("record", "base"), _installed_records())
def test_loop_mode_reads_each_installed_base_from_its_record(
    record: _bases.Base, base: type[asyncio.AbstractEventLoop] | None
) -> None:
    cls = _loop._check_base(base, "test")
    assert aiowheel.loops.base_class(record.name) is base
    if base is not None:
        assert _bases.of_class(base) is record
        assert _bases.of_class(type("Sub", (base,), {})) is record  # a subclass keeps the heap
    else:
        assert _bases.of_class(cls) is None  # asyncio's own classes: the asyncio record's
    assert _bases.near_pad(cls) == record.pad
    if issubclass(cls, asyncio.BaseEventLoop):
        assert record.pad == 0.0
    loop = aiowheel.new_event_loop(base)
    try:
        checks = _loop._debug_checks_for(loop, cls)
        # asyncio's checks refuse a non-callable; uvloop's thread check lets it through
        if record.debug_checks == "asyncio":
            with pytest.raises(TypeError):
                checks(42, "call_at")
        else:
            checks(42, "call_at")
        assert _virtual._libuv(loop) == record.libuv
    finally:
        loop.close()


@pytest.mark.parametrize(("record", "base"), _installed_records())
def test_a_virtual_clock_sees_each_installed_base_as_its_record_says(
    record: _bases.Base, base: type[asyncio.AbstractEventLoop] | None
) -> None:
    loop = aiowheel.testing.virtual_loop_factory(base)()
    try:
        clock = aiowheel.testing.clock_of(loop)
        assert clock is not None
        requeue = _virtual._requeue_for(loop, clock)
        if record.requeue == "call_soon":
            assert requeue is clock._base_call_soon
        else:
            named = {"native_call_later": "requeue_now", "timer": "requeue"}
            assert getattr(requeue, "__name__", None) == named[record.requeue]
    finally:
        loop.close()


def test_a_base_with_no_record_gets_the_unmeasured_pad() -> None:
    class Foreign(asyncio.AbstractEventLoop):  # asyncio.events in its MRO, no record's library
        pass

    assert _bases.of_class(Foreign) is None
    assert _bases.near_pad(Foreign) == _bases.UNMEASURED_PAD


@pytest.mark.parametrize("record", _bases.RECORDS[1:], ids=lambda record: record.name)
def test_each_factory_files_as_its_record_says(
    record: _bases.Base, monkeypatch: pytest.MonkeyPatch
) -> None:
    class StandIn(asyncio.SelectorEventLoop):
        pass

    monkeypatch.setattr(_loops, "base_class", lambda name: StandIn)
    loop = aiowheel.loops.factory(record.name)()
    try:
        config = aiowheel.config_of(loop)
        assert config is not None
        expected = 0.0 if record.all_on_the_wheel else aiowheel.LoopConfig(StandIn).threshold
        assert config.threshold == expected
    finally:
        loop.close()


def test_a_missing_base_library_is_named_with_its_record_extra_and_python() -> None:
    # A fresh interpreter where no base library imports, as where none is installed.
    code = (
        "import sys\n"
        "from aiowheel._common import _bases\n"
        "for record in _bases.RECORDS[1:]: sys.modules[record.module] = None\n"
        "import aiowheel.loops\n"
        "for record in _bases.RECORDS[1:]:\n"
        "    try:\n"
        "        aiowheel.loops.factory(record.name)()\n"
        "    except ImportError as exc:\n"
        "        print(exc)\n"
    )
    proc = run_python(["-c", code], timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    expected = [
        f"aiowheel.loops.{record.factory} needs {record.module}, which is not installed here: "
        f"pip install 'aiowheel[{record.extra}]'"
        + (f" (on Python {record.python}+)" if record.python else "")
        for record in _bases.RECORDS[1:]
    ]
    assert out == expected


def test_granian_registers_every_base_granian_offers() -> None:
    pytest.importorskip("granian")
    import aiowheel.granian

    choices = aiowheel.granian._choices()
    offered = [record for record in _bases.RECORDS if record.granian]
    assert list(choices) == [*(record.name for record in offered), "auto"]
    assert list(choices) == ["asyncio", "uvloop", "rloop", "auto"]  # granian's --loop list
    for record in offered:
        packages, made = choices[record.name]
        assert made is aiowheel.loops.factory(record.name)
        assert packages == ([] if record.module is None else [record.module])
    assert choices["auto"] == ([], aiowheel.loops.auto)


def test_gunicorn_workers_name_bases_the_factory_knows() -> None:
    import aiowheel.gunicorn

    for _module, _cls, _package, base in aiowheel.gunicorn._WORKERS.values():
        aiowheel.loops.factory(base)  # raises for a name that is not a base's (or auto)


def test_the_pads_are_the_measured_ones() -> None:
    # The loop-mode page and aiowheel._loopmode._loop's docstring: a millisecond on uvloop (whole
    # milliseconds) and veloxloop (its own timers fire early), a microsecond on rloop, zuvloop
    # and zloop, none on asyncio's heap (bracio's too).
    pads = {record.name: record.pad for record in _bases.RECORDS}
    assert pads == {
        "asyncio": 0.0, "uvloop": 1e-3, "rloop": 1e-6, "zuvloop": 1e-6,
        "veloxloop": 1e-3, "zloop": 1e-6, "bracio": 0.0,
    }  # fmt: skip
    assert [record.name for record in _bases.RECORDS if record.all_on_the_wheel] == ["bracio"]
    assert [record.name for record in _bases.RECORDS if record.libuv] == ["uvloop", "zuvloop"]
