"""The compiled build documents what the pure one does: ``help()`` and ``inspect.getdoc`` on every
public class, function, method and property of ``aiowheel`` read the same in both builds.

mypyc writes no docstrings into the C it generates; setup.py adds them from the sources (see its
``_add_docstrings``). Each build is read in a fresh interpreter and the two compared.
"""

from __future__ import annotations

import os
import pydoc

import pytest

import aiowheel
from tests.support import json_from_build

# Prints {name: [kind, inspect.getdoc()]} for every public name of aiowheel.__all__ that is a
# class or a function, and every public method, property and attribute of those classes that an
# aiowheel class defines (what is inherited from object, tuple or Exception is not aiowheel's).
_DOCS_SCRIPT = r"""
import inspect, json, sys
import aiowheel

def kind(raw):  # as the pure build has them (the compiled one's properties are getsets)
    if isinstance(raw, property):
        return "property"
    if isinstance(raw, (staticmethod, classmethod)) or inspect.isroutine(raw):
        return "method"
    return "attribute"

out = {"compiled": aiowheel.COMPILED, "docs": {}}
for name in aiowheel.__all__:
    obj = getattr(aiowheel, name)
    if not (inspect.isclass(obj) or inspect.isroutine(obj)):
        continue
    out["docs"][name] = ["class" if inspect.isclass(obj) else "function", inspect.getdoc(obj)]
    if not inspect.isclass(obj):
        continue
    for attr in dir(obj):
        if attr.startswith("_"):
            continue
        owner = next((k for k in obj.__mro__ if attr in vars(k)), None)
        if owner is None or not owner.__module__.startswith("aiowheel"):
            continue
        raw = vars(owner)[attr]
        out["docs"][f"{name}.{attr}"] = [kind(raw), inspect.getdoc(getattr(obj, attr))]
print(json.dumps(out))
"""


def _docs(no_extensions: bool) -> dict[str, object]:
    result: dict[str, object] = json_from_build(no_extensions, _DOCS_SCRIPT)
    return result


def test_every_public_docstring_reads_the_same_in_both_builds() -> None:
    compiled = _docs(no_extensions=False)
    if not compiled["compiled"]:
        assert os.environ.get("AIOWHEEL_EXPECT_COMPILED") != "1"
        pytest.skip("no compiled build is installed here")
    pure = _docs(no_extensions=True)
    assert pure["compiled"] is False
    got: dict[str, list[str | None]] = compiled["docs"]  # type: ignore[assignment]
    want: dict[str, list[str | None]] = pure["docs"]  # type: ignore[assignment]
    assert sorted(got) == sorted(want)
    differ = [name for name in want if got[name][1] != want[name][1]]
    assert differ == [], f"the compiled build's docstrings differ: {differ}"
    # Every class, function, method and property has one (attributes, such as a dataclass's
    # fields, have none in either build), and the ones the issue named are there.
    undocumented = [name for name, (kind, doc) in want.items() if kind != "attribute" and not doc]
    assert undocumented == []
    for name in (
        "Timer.call_later",
        "Purgatory.watch",
        "DelayedOperation.try_complete",
        "Watchdog.feed",
        "PeriodicHandle.next_deadline",
        "Timer.tick",
    ):
        assert want[name][0] in ("method", "property") and want[name][1], name
    assert len([kind for kind, _ in want.values() if kind in ("method", "property")]) > 60


def test_help_shows_every_public_method_and_property() -> None:
    # pydoc, as help() renders it, in the running build (CI runs both).
    for cls in (
        aiowheel.Timer,
        aiowheel.Purgatory,
        aiowheel.DelayedOperation,
        aiowheel.Watchdog,
        aiowheel.PeriodicHandle,
        aiowheel.Timeout,
    ):
        text = pydoc.plain(pydoc.render_doc(cls))
        doc = pydoc.getdoc(cls)
        assert doc and doc.splitlines()[0] in text, cls
        for attr in dir(cls):
            if attr.startswith("_") or attr not in vars(cls):
                continue
            doc = pydoc.getdoc(getattr(cls, attr))
            assert doc, f"{cls.__name__}.{attr} has no docstring"
            assert doc.splitlines()[0] in text, f"{cls.__name__}.{attr}"
