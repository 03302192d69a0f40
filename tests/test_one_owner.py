"""The driver is the only owner of the store and the wake-up, and the rooms form a stack.

These read the library's sources (no import of them): a module that starts writing the wheel
itself, or an entry that reaches back up to the Timer, fails here before anyone has to notice
it in a review.
"""

from __future__ import annotations

import ast
import re
import tokenize
from pathlib import Path

import pytest

from tests.house import resolve, room_imports, rooms

MODULES = {name: path for name, path in rooms().items() if path.suffix == ".py"}

# The driver's own state: only the driver (and the store and the sans-IO wheel, for their own
# attributes) may name it. Everything else asks the driver (aiowheel._time._entry.Owner, or its
# small API: aiowheel._time._view reads it, aiowheel._loopmode._loop and _loopcalls drive it).
DRIVER_STATE = re.compile(r"\._(wheel|store|armed|due|reaper|wake_handle)\b|\._arm\(")


def _imports(name: str) -> set[str]:
    """The rooms the room ``name`` imports, at run time or for type checking alike."""
    return room_imports(name, MODULES)


def _code(path: Path) -> list[tuple[int, str]]:
    """(line, text) of ``path``'s code lines, strings and comments blanked out."""
    lines = path.read_text().splitlines()
    blank = [list(line) for line in lines]
    with path.open() as source:
        for token in tokenize.generate_tokens(source.readline):
            if token.type in (tokenize.STRING, tokenize.COMMENT):
                (row, col), (end_row, end_col) = token.start, token.end
                for number in range(row, end_row + 1):
                    first = col if number == row else 0
                    last = end_col if number == end_row else len(blank[number - 1])
                    blank[number - 1][first:last] = " " * (last - first)
    return [(number, "".join(chars)) for number, chars in enumerate(blank, 1)]


def test_only_the_driver_touches_the_store_and_the_wake_up() -> None:
    owners = {f"_time.{room}" for room in ("_driver", "_setup", "_reaper", "_store", "_wheel")}
    offenders = [
        f"{name}:{number}: {line.strip()}"
        for name, path in MODULES.items()
        if name not in owners
        for number, line in _code(path)
        if DRIVER_STATE.search(line) and not line.startswith(("from ", "import "))
    ]
    assert offenders == []


def test_the_guard_itself_sees_a_write_to_the_wheel() -> None:
    # The pattern above must match the ways the driver's state is named.
    for line in ("timer._wheel.remove(self)", "self._timer._arm()", "x._reaper", "t._due"):
        assert DRIVER_STATE.search(line), line
    assert not DRIVER_STATE.search("owner._unfile(self)")


def test_the_guard_reads_code_not_strings(tmp_path: Path) -> None:
    room = tmp_path / "room.py"
    room.write_text('x = "_time._wheel"  # the ._wheel\ny = t._wheel\n"""a\n._store"""\n')
    assert [number for number, line in _code(room) if DRIVER_STATE.search(line)] == [2]


@pytest.mark.parametrize("room", ["_timeout", "_periodic", "_awaiting", "_handles", "_entry"])
def test_entries_and_coroutines_do_not_reach_up_to_the_timer_or_the_driver(room: str) -> None:
    reached = _imports(f"_time.{room}")
    assert reached, f"_time.{room} imports no room: the reader lost its imports"
    assert reached & {"_time._timer", "_time._driver", "_loopmode._default"} == set()
    assert {other.partition(".")[0] for other in reached} <= {"_time", "_common"}


def test_no_circle_among_the_rooms() -> None:
    graph = {name: _imports(name) for name in MODULES}
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
    one.write_text(
        "from . import _driver\nfrom ._timer import Timer\nfrom .._loopmode import _loop\n"
        "from .._common._build import COMPILED_MODULES\nimport aiowheel._seeing._census\n"
    )
    known = {name: one for name in ("_time.a", "_time._driver", "_time._timer")}
    known |= {name: one for name in ("_loopmode._loop", "_common._build", "_seeing._census")}
    assert room_imports("_time.a", known) == set(known) - {"_time.a"}


# -- the shape of the house (issue 40): one store seam, no writes into another room's state,
# -- and sizes a reader can hold in one sitting

# The rooms the driver is made of, each with its own state; other rooms ask them.
DRIVER_ROOMS = tuple(
    f"_time.{room}"
    for room in ("_driver", "_setup", "_binding", "_threads", "_store", "_reaper", "_dispatch")
)
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
    # The C core is loaded, made and called in aiowheel._time._store alone; the driver talks to a
    # Store and has no branch on "is there a core" (issue 40's 27 of them).
    assert not {"native", "_core", "Core", "NativeStore"} & _names(MODULES["_time._driver"])
    loaders = {name: _core_names(path) for name, path in MODULES.items() if _core_names(path)}
    # The store loads the core, sets it up and calls it; the one other room that takes from it
    # is _awaiting, below the store, and it takes DONE alone: a stateless awaitable that needs
    # no set-up (Timeout.__aexit__'s return, which must not allocate).
    assert loaders == {"_time._store": {"_core"}, "_time._awaiting": {"DONE"}}
    assert not {"native", "_core", "Core", "NativeStore"} & _names(MODULES["_time._setup"])
    makers = [name for name, path in MODULES.items() if "store_for" in _names(path)]
    assert makers == ["_time._setup"]  # one store per driver, made with the driver's state


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


def _spans(path: Path, room: str) -> list[tuple[str, str, int]]:
    """(kind, ``room:qualified name``, lines) of every class and function in ``path``."""
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

    visit(ast.parse(path.read_text(), str(path)), f"{room}:")
    return out


# Classes over ~450 lines and functions over ~60 (issue 40), each with the size it must not
# grow past and why it is still there: a ratchet, lowered as each is taken apart.
OVERSIZE = {
    "_purgatory._purgatory:Purgatory.wait": 64,  # a public call's checks, in the order they run
    "_deadlines._aiohttp:deadline_middleware": 63,  # the middleware and its docstring, one closure
    "_time._wheel:Wheel.advance": 72,  # the cascade and the due walk: the theory of operation
}


def test_no_class_or_function_outgrows_a_sitting() -> None:
    grown = []
    for room, path in MODULES.items():
        for kind, name, lines in _spans(path, room):
            limit = OVERSIZE.get(name, 450 if kind == "class" else 60)
            if lines > limit:
                grown.append(f"{kind} {name}: {lines} lines (at most {limit})")
    assert grown == []


# -- a leading underscore means "private to this room" (issue 52): a name another room imports
# -- or reads off the module is that room's API, and is spelled without one


def _private_names_taken(path: Path, at: str) -> list[str]:
    """``room.name`` for each underscored name ``path`` (the room named ``at``) imports from
    another aiowheel room (``from ._room import _name``, ``from .._f._room import _name``) or
    reads off one it imported (``_room._name``, after ``from . import _room`` or ``from .._f
    import _room``)."""
    tree = ast.parse(path.read_text(), str(path))
    held: dict[str, str] = {}  # local name -> room, for `from . import _room`
    taken: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = resolve(at, node.level, node.module)
            for alias in node.names:
                if ".".join([*base, alias.name]) in MODULES:  # a room taken whole
                    held[alias.asname or alias.name] = ".".join([*base, alias.name])
                elif alias.name.startswith("_") and not alias.name.startswith("__"):
                    taken.append(f"{'.'.join(base)}.{alias.name}")
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and held.get(node.value.id, at) != at
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            taken.append(f"{held[node.value.id]}.{node.attr}")
    return sorted(set(taken))


def test_no_room_takes_another_rooms_private_names() -> None:
    offenders = [
        f"{name} takes {taken}"
        for name, path in MODULES.items()
        for taken in _private_names_taken(path, name)
        if taken.rpartition(".")[0] in MODULES
    ]
    assert offenders == []


def test_the_underscore_check_sees_both_ways_of_taking_a_name(tmp_path: Path) -> None:
    room = tmp_path / "room.py"
    room.write_text(
        "from .._seeing import _census\nfrom ._entry import _Timed, Owner\n"
        "from .._common._bases import _near\n"
        "x = _census._loop_of(None, 'f()')\ny = _census.pending\n"
    )
    assert _private_names_taken(room, "_time.room") == [
        "_common._bases._near",
        "_seeing._census._loop_of",
        "_time._entry._Timed",
    ]
