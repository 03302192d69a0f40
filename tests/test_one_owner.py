"""The engine is the only owner of the wheel and the wake-up, and the rooms form a stack.

These read the library's sources (no import of them): a module that starts writing the wheel
itself, or an entry that reaches back up to the Timer, fails here before anyone has to notice
it in a review.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.support import PACKAGE

MODULES = {path.stem: path for path in sorted(PACKAGE.glob("*.py"))}

# The engine's own state: only the engine (and the sans-IO wheel, for its own attributes)
# may name it. Everything else asks the engine (aiowheel._entry.Owner).
ENGINE_STATE = re.compile(r"\._(wheel|armed|ready|reaper|wake_handle)\b|\._arm\(")


def _imports(path: Path) -> set[str]:
    """The aiowheel modules ``path`` imports, at run time or for type checking alike."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module:  # from ._x import y
                found.add(node.module.split(".")[0])
            elif node.level == 1:  # from . import _x, _y
                found.update(alias.name for alias in node.names)
            elif node.module and node.module.startswith("aiowheel."):
                found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("aiowheel."):
                    found.add(alias.name.split(".")[1])
    return found & set(MODULES)


def test_only_the_engine_touches_the_wheel_and_the_wake_up() -> None:
    offenders = [
        f"{path.name}:{number}: {line.strip()}"
        for name, path in MODULES.items()
        if name not in ("_engine", "_wheel")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if ENGINE_STATE.search(line)
    ]
    assert offenders == []


def test_the_guard_itself_sees_a_write_to_the_wheel() -> None:
    # The pattern above must match the ways the engine's state is named.
    for line in ("timer._wheel.remove(self)", "self._timer._arm()", "x._reaper", "t._ready"):
        assert ENGINE_STATE.search(line), line
    assert not ENGINE_STATE.search("owner._unfile(self)")


@pytest.mark.parametrize("room", ["_timeout", "_periodic", "_awaiting", "_handles", "_entry"])
def test_entries_and_coroutines_do_not_reach_up_to_the_timer_or_the_engine(room: str) -> None:
    assert _imports(MODULES[room]) & {"_timer", "_engine", "_default", "_loop"} == set()


def test_no_circle_among_the_rooms() -> None:
    graph = {name: _imports(path) - {name} for name, path in MODULES.items()}
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(name: str) -> None:
        state[name] = "open"
        path.append(name)
        for target in sorted(graph[name]):
            if state.get(target) == "open":
                cycle = [*path[path.index(target) :], target]
                raise AssertionError("import circle: " + " -> ".join(cycle))
            if target not in state:
                visit(target)
        path.pop()
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name)


def test_the_circle_check_finds_a_circle(tmp_path: Path) -> None:
    # The reader of imports sees both spellings a circle could be made of.
    one = tmp_path / "a.py"
    one.write_text("from . import _engine\nfrom ._timer import Timer\n")
    assert _imports(one) == {"_engine", "_timer"}
