"""The driver is the only owner of the store and the wake-up, and the rooms form a stack.

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

# The driver's own state: only the driver (and the store and the sans-IO wheel, for their own
# attributes) may name it. Everything else asks the driver (aiowheel._entry.Owner, or its
# small API: aiowheel._view reads it, aiowheel._loop and _loopcalls drive it).
DRIVER_STATE = re.compile(r"\._(wheel|store|armed|due|reaper|wake_handle)\b|\._arm\(")


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


def test_only_the_driver_touches_the_store_and_the_wake_up() -> None:
    offenders = [
        f"{path.name}:{number}: {line.strip()}"
        for name, path in MODULES.items()
        if name not in ("_driver", "_setup", "_reaper", "_store", "_wheel")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if DRIVER_STATE.search(line) and not line.startswith(("from ", "import "))
    ]
    assert offenders == []


def test_the_guard_itself_sees_a_write_to_the_wheel() -> None:
    # The pattern above must match the ways the driver's state is named.
    for line in ("timer._wheel.remove(self)", "self._timer._arm()", "x._reaper", "t._due"):
        assert DRIVER_STATE.search(line), line
    assert not DRIVER_STATE.search("owner._unfile(self)")


@pytest.mark.parametrize("room", ["_timeout", "_periodic", "_awaiting", "_handles", "_entry"])
def test_entries_and_coroutines_do_not_reach_up_to_the_timer_or_the_driver(room: str) -> None:
    assert _imports(MODULES[room]) & {"_timer", "_driver", "_default", "_loop"} == set()


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
    one.write_text("from . import _driver\nfrom ._timer import Timer\n")
    assert _imports(one) == {"_driver", "_timer"}


# -- the shape of the house (issue 40): one store seam, no writes into another room's state,
# -- and sizes a reader can hold in one sitting

# The rooms the driver is made of, each with its own state; other rooms ask them.
DRIVER_ROOMS = ("_driver", "_setup", "_binding", "_threads", "_store", "_reaper", "_dispatch")
# Names under which those rooms' objects are held elsewhere.
DRIVER_HELD = re.compile(r"(^|\.)(_?driver|_?binding|_site|_store|store|_loop_thread|_reaper|lag)$")


def _writes(path: Path) -> list[tuple[int, str]]:
    """Every assignment to an attribute of an object other than self / cls: (line, target)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        else:
            continue
        for target in targets:
            for part in ast.walk(target):
                if isinstance(part, ast.Attribute) and isinstance(part.ctx, ast.Store):
                    base = part.value
                    if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                        continue
                    found.append((node.lineno, ast.unparse(part)))
    return found


def test_no_room_writes_the_drivers_state() -> None:
    offenders = [
        f"{path.name}:{line}: {target}"
        for name, path in MODULES.items()
        if name not in DRIVER_ROOMS
        for line, target in _writes(path)
        if DRIVER_HELD.search(target.rpartition(".")[0])
    ]
    assert offenders == []


def test_the_write_guard_sees_a_write_through_a_held_driver(tmp_path: Path) -> None:
    room = tmp_path / "otel.py"
    room.write_text("def f(view):\n    view._driver.lag.listener = print\n    view._x = 1\n")
    targets = [target for _, target in _writes(room)]
    assert targets == ["view._driver.lag.listener", "view._x"]
    assert DRIVER_HELD.search(targets[0].rpartition(".")[0])
    assert not DRIVER_HELD.search(targets[1].rpartition(".")[0])


def _names(path: Path) -> set[str]:
    """The identifiers of ``path``'s code (not its comments or strings)."""
    return {
        node.id if isinstance(node, ast.Name) else node.attr
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, (ast.Name, ast.Attribute))
    } | {
        alias.name
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def test_one_store_seam_the_driver_never_asks_whether_there_is_a_core() -> None:
    # The C core is loaded, made and called in aiowheel._store alone; the driver talks to a
    # Store and has no branch on "is there a core" (issue 40's 27 of them).
    assert not {"native", "_core", "Core", "NativeStore"} & _names(MODULES["_driver"])
    loaders = {name: _core_names(path) for name, path in MODULES.items() if _core_names(path)}
    # The store loads the core, sets it up and calls it; the one other room that takes from it
    # is _awaiting, below the store, and it takes DONE alone: a stateless awaitable that needs
    # no set-up (Timeout.__aexit__'s return, which must not allocate).
    assert loaders == {"_store": {"_core"}, "_awaiting": {"DONE"}}
    assert not {"native", "_core", "Core", "NativeStore"} & _names(MODULES["_setup"])
    makers = [name for name, path in MODULES.items() if "store_for" in _names(path)]
    assert makers == ["_setup"]  # one store per driver, made with the driver's state


def _core_names(path: Path) -> set[str]:
    """What ``path`` takes from the native core: ``{"_core"}`` for the module itself (``from .
    import _core``, or a mention of the name), else the names of ``from ._core import ...``."""
    taken = {"_core"} if "_core" in _names(path) else set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module == "_core":
            taken.update(alias.name for alias in node.names)
    return taken


def test_the_seam_check_sees_each_way_of_taking_from_the_core(tmp_path: Path) -> None:
    room = tmp_path / "room.py"
    room.write_text("def f():\n    from ._core import DONE, setup\n")
    assert _core_names(room) == {"DONE", "setup"}
    room.write_text("from . import _core\n")
    assert _core_names(room) == {"_core"}
    room.write_text("from ._wheel import Wheel\n")
    assert _core_names(room) == set()


def _spans(path: Path) -> list[tuple[str, str, int]]:
    """(kind, qualified name, lines) of every class and function in ``path``."""
    out: list[tuple[str, str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                kind = "class" if isinstance(child, ast.ClassDef) else "def"
                name = f"{prefix}{child.name}"
                assert child.end_lineno is not None
                out.append((kind, name, child.end_lineno - child.lineno + 1))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(), str(path)), f"{path.stem}:")
    return out


# Classes over ~450 lines and functions over ~60 (issue 40), each with the size it must not
# grow past and why it is still there: a ratchet, lowered as each is taken apart.
OVERSIZE = {
    "_purgatory:Purgatory.wait": 64,  # the checks of a public call, in the order they run
    "aiohttp:deadline_middleware": 63,  # the middleware and its docstring, one closure
    "_wheel:Wheel.advance": 72,  # the cascade and the due walk: the theory of operation's core
}


def test_no_class_or_function_outgrows_a_sitting() -> None:
    grown = []
    for path in MODULES.values():
        for kind, name, lines in _spans(path):
            limit = OVERSIZE.get(name, 450 if kind == "class" else 60)
            if lines > limit:
                grown.append(f"{kind} {name}: {lines} lines (at most {limit})")
    assert grown == []


# -- a leading underscore means "private to this room" (issue 52): a name another room imports
# -- or reads off the module is that room's API, and is spelled without one


def _private_names_taken(path: Path) -> list[str]:
    """``room.name`` for each underscored name ``path`` imports from another aiowheel room
    (``from ._room import _name``) or reads off one it imported (``_room._name``)."""
    tree = ast.parse(path.read_text(), str(path))
    rooms: dict[str, str] = {}  # local name -> room, for `from . import _room`
    taken: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                room = node.module.split(".")[0]
                taken += [
                    f"{room}.{alias.name}"
                    for alias in node.names
                    if alias.name.startswith("_") and not alias.name.startswith("__")
                ]
            else:
                rooms.update({alias.asname or alias.name: alias.name for alias in node.names})
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and rooms.get(node.value.id, path.stem) != path.stem
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            taken.append(f"{rooms[node.value.id]}.{node.attr}")
    return sorted(set(taken))


def test_no_room_takes_another_rooms_private_names() -> None:
    offenders = [
        f"{name} takes {taken}"
        for name, path in MODULES.items()
        for taken in _private_names_taken(path)
        if taken.split(".")[0] in MODULES
    ]
    assert offenders == []


def test_the_underscore_check_sees_both_ways_of_taking_a_name(tmp_path: Path) -> None:
    room = tmp_path / "room.py"
    room.write_text(
        "from . import _census\nfrom ._entry import _Timed, Owner\n"
        "x = _census._loop_of(None, 'f()')\ny = _census.pending\n"
    )
    assert _private_names_taken(room) == ["_census._loop_of", "_entry._Timed"]
