"""The public faces over the folders (issue 60): nothing a user sees changed when the rooms moved.

Every name the API page documents imports from the path it shows; each face is thin (a
docstring, the names it hands on, its ``__all__``), and hands on exactly its room's public
names (the pytest plugin: every hook too, since pytest finds hooks by name); pickled loop
factories name only public modules, so a pickle outlives the next move of the rooms.
"""

from __future__ import annotations

import ast
import importlib
import io
import pickle
import re
from typing import Any

import pytest

import aiowheel
import aiowheel.testing
from tests.house import rooms
from tests.support import PACKAGE, ROOT, grpc_installed

DIRECTIVE = re.compile(r"^\.\. auto(?:function|class|exception|module|data)::\s+([\w.]+)", re.M)

# The faces with an adapter of their own: what a server imports by name and runs (gunicorn's
# worker classes, made on first use; granian's registry, filled on import and by ``python -m``).
ADAPTERS = ("gunicorn", "granian")
SMALL_FACE = 60  # lines of code (the docstring left out): an adapter face at most


def _documented() -> list[str]:
    return DIRECTIVE.findall((ROOT / "docs" / "api.md").read_text())


def _import(path: str) -> object:
    """The object ``path`` names, imported as a user's code would: the longest module prefix,
    then attributes."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            found = getattr(found, attribute)
        return found
    raise ImportError(path)


def test_every_name_the_api_page_lists_imports_from_the_path_it_shows() -> None:
    documented = _documented()
    assert len(documented) > 50, "the API page's directives were not read"
    for path in documented:
        if path.startswith(("aiowheel.gunicorn", "aiowheel.granian")):
            pytest.importorskip(path.split(".")[1])  # the servers' own packages
        if path.startswith("aiowheel.grpc") and not grpc_installed():
            continue  # no grpcio wheel for this interpreter (3.14t): CI requires it elsewhere
        if path.startswith(("aiowheel.psycopg", "aiowheel.sqlalchemy")):
            pytest.importorskip(OPTIONAL[path.split(".")[1]])
        assert _import(path) is not None, path


def _faces() -> dict[str, ast.Module]:
    return {
        name: ast.parse(path.read_text())
        for name, path in rooms().items()
        if "." not in name and path.suffix == ".py" and name not in ("__init__", "__main__")
    }


def _all(tree: ast.Module) -> list[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
        ):
            value = ast.literal_eval(node.value)
            assert isinstance(value, list)
            return value
    raise AssertionError("no __all__")


def test_each_face_is_a_docstring_and_the_names_of_its_room() -> None:
    faces = _faces()
    assert set(faces) >= {"loops", "testing", "redis", "asgi", "pytest", *ADAPTERS, *OPTIONAL}
    for name, tree in faces.items():
        if name in ADAPTERS:
            code = [node for node in tree.body[1:]]
            lines = sum((node.end_lineno or node.lineno) - node.lineno + 1 for node in code)
            assert lines <= SMALL_FACE, f"aiowheel.{name}: {lines} lines of code"
            continue
        docstring, *body = tree.body
        assert isinstance(docstring, ast.Expr) and isinstance(docstring.value, ast.Constant)
        imports = [node for node in body if isinstance(node, ast.ImportFrom)]
        assert len(imports) == 1 and len(body) == 2, f"aiowheel.{name} is more than a face"
        (source,) = imports
        assert source.level == 1 and (source.module or "").count(".") == 1, source.module
        handed = {alias.name for alias in source.names}
        room = _room(name, source.module or "")
        if room is None:
            # Its package is missing here (grpcio has no 3.14t wheel; psycopg needs a libpq):
            # the room's own __all__, as written.
            public = _all(ast.parse(rooms()[source.module or ""].read_text()))
            hooks: set[str] = set()
        else:
            public = room.__all__
            hooks = {hook for hook in vars(room) if hook.startswith("pytest_")}
        assert handed == set(public) | hooks, f"aiowheel.{name} and its room differ"
        assert sorted(_all(tree)) == sorted(public), name


# The faces over a package of their own that an interpreter or a machine may lack.
OPTIONAL = {"grpc": "grpc", "psycopg": "psycopg", "sqlalchemy": "sqlalchemy"}


def _room(face: str, module: str) -> Any:
    """The face's room, imported; None where the package it adapts cannot be imported here
    (then CI requires it on the other passes: AIOWHEEL_REQUIRE_GRPC, _POSTGRES)."""
    if face == "grpc" and not grpc_installed():
        return None
    try:
        return importlib.import_module(f"aiowheel.{module}")
    except ImportError:
        if face not in OPTIONAL:
            raise
        return None


def test_the_plugin_face_hands_pytest_every_hook_of_its_room() -> None:
    # pytest finds hooks by name on the module it is given: a hook left out of the face is
    # silently never called (the fuzzing protocol, once: 'aiowheel: 0 tests on loop mode').
    import aiowheel.pytest
    from aiowheel._plugin import _hooks

    hooks = {name for name in vars(_hooks) if name.startswith("pytest_")}
    assert len(hooks) >= 10
    assert all(getattr(aiowheel.pytest, hook) is getattr(_hooks, hook) for hook in hooks)


class _Recorder(pickle.Unpickler):
    """An unpickler that notes each module a pickle names as it finds the class."""

    def __init__(self, data: bytes) -> None:
        super().__init__(io.BytesIO(data))
        self.modules: set[str] = set()

    def find_class(self, module: str, name: str) -> Any:
        self.modules.add(module)
        return super().find_class(module, name)


def _globals(data: bytes) -> set[str]:
    """The modules a pickle names (what unpickling it imports; a class's own name, such as
    asyncio's ``_UnixSelectorEventLoop``, is its module's business)."""
    recorder = _Recorder(data)
    recorder.load()
    return recorder.modules


@pytest.mark.parametrize(
    "factory",
    [
        pytest.param(lambda: aiowheel.loop_factory(threshold=0.02), id="loop_factory"),
        pytest.param(lambda: aiowheel.testing.virtual_loop_factory(start=5.0), id="virtual"),
        pytest.param(
            lambda: aiowheel.testing.virtual_loop_factory(seed=3, jitter=0.25), id="fuzzed"
        ),
    ],
)
def test_a_pickled_factory_names_only_public_modules(factory: Any) -> None:
    made = factory()
    data = pickle.dumps(made)
    named = _globals(data)
    assert named and all(not part.startswith("_") for m in named for part in m.split(".")), named
    copy = pickle.loads(data)
    assert copy == made
    loop = copy()
    loop.close()


# aiowheel.loop_factory(threshold=0.02), pickled by aiowheel 0.4.0 (397daa8~1, pure build, on
# Linux): it names aiowheel._loop.LoopFactory and a LoopConfig of three fields.
PICKLED_BY_0_4 = bytes.fromhex(
    "80049582000000000000008c0e61696f776865656c2e5f6c6f6f70948c0b4c6f6f70466163746f7279949394"
    "68008c0a4c6f6f70436f6e6669679493942981945d94288c136173796e63696f2e756e69785f6576656e7473"
    "948c165f556e697853656c6563746f724576656e744c6f6f70949394473f50624dd2f1a9fc473f947ae147ae"
    "147b6562859452942e"
)


def test_a_factory_pickled_by_0_4_loads_and_makes_the_same_loops() -> None:
    assert {"aiowheel._loop"} <= _globals(PICKLED_BY_0_4)
    factory = pickle.loads(PICKLED_BY_0_4)
    assert factory == aiowheel.loop_factory(threshold=0.02)
    assert factory.config.clock is None and factory.config.max_batch is None
    loop = factory()
    try:
        assert aiowheel.config_of(loop) == factory.config
    finally:
        loop.close()


def test_the_top_level_holds_the_faces_and_the_folders_alone() -> None:
    top = {path.name for path in PACKAGE.iterdir() if not path.name.startswith("__pycache__")}
    sources = {name for name in top if name.endswith((".py", ".c", ".pyi"))}
    assert sources == {f"{face}.py" for face in _faces()} | {"__init__.py", "__main__.py"}
