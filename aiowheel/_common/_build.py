"""Which build runs: the compiled extension modules, or the pure-Python sources beside them.

An install that could compile leaves both in the package's folders, ``_time/_timer.py`` next to
``_time/_timer.cpython-311-x86_64-linux-gnu.so``, and Python's import system prefers the extension.
``AIOWHEEL_NO_EXTENSIONS=1`` (read when aiowheel is first imported) puts a finder in front that
loads every aiowheel module from its ``.py`` source instead: the whole package switches, never
a mix, since compiled modules reach each other's classes directly. This module is never
compiled itself, and imports nothing of aiowheel's.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

__all__ = ["COMPILED_MODULES", "is_compiled", "mypyc_attr", "prefer_sources", "sources_preferred"]

if TYPE_CHECKING:
    from mypy_extensions import mypyc_attr
else:
    # mypyc acts on this decorator when it compiles (it resolves the name to mypy_extensions'
    # through this import); the pure-Python build needs no mypy_extensions at run time. It
    # lives here because mypyc compiles the else branch of TYPE_CHECKING as unreachable.

    def mypyc_attr(**_: Any) -> Any:
        """No-op stand-in for ``mypy_extensions.mypyc_attr`` at run time."""
        return lambda cls: cls


#: The modules the compiled build compiles (setup.py's list, by module name).
COMPILED_MODULES = (
    "_common._validate",
    "_time._tasks",
    "_time._wheel",
    "_time._entry",
    "_time._handles",
    "_time._observe",
    "_time._threads",
    "_time._grid",
    "_time._binding",
    "_time._store",
    "_time._reaper",
    "_time._dispatch",
    "_time._setup",
    "_time._driver",
    "_time._view",
    "_loopmode._loopcalls",
    "_time._timer",
    "_time._timeout",
    "_time._periodic",
    "_purgatory._watchers",
    "_purgatory._delayed",
    "_purgatory._wait",
    "_purgatory._purgatory",
    "_deadlines._deadline",
    "_deadlines._propagate",
)


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Finds ``package.<name>`` modules, at any depth, as ``.py`` files under the package's
    directories (``aiowheel._time._wheel``: ``_time/_wheel.py``); a folder itself (no such file)
    is left to the normal finders."""

    def __init__(self, package: str, path: Sequence[str]) -> None:
        self._prefix = package + "."
        self._path = list(path)

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        """The spec of the module's ``.py`` file, or None for modules of other packages."""
        if not fullname.startswith(self._prefix):
            return None
        name = fullname[len(self._prefix) :]
        for directory in self._path:
            source = os.path.join(directory, *name.split(".")) + ".py"
            if os.path.isfile(source):
                return importlib.util.spec_from_file_location(fullname, source)
        return None


def sources_preferred(package: str) -> bool:
    """True if ``package``'s modules load from their ``.py`` sources (:func:`prefer_sources`):
    then no extension of the package may be used, the native core (``_core``) included."""
    return any(
        isinstance(finder, _SourceFinder) and finder._prefix == package + "."
        for finder in sys.meta_path
    )


def prefer_sources(package: str, path: Sequence[str]) -> None:
    """Make ``package``'s modules load from their ``.py`` sources from now on."""
    if not sources_preferred(package):
        sys.meta_path.insert(0, _SourceFinder(package, path))


def is_compiled(package: str, modules: Sequence[str]) -> bool:
    """True if every one of ``modules`` of the (imported) ``package`` is an extension module."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    for name in modules:
        module = sys.modules.get(f"{package}.{name}")
        # One not imported yet (the deadlines' rooms load with their adapters): where it
        # would load from, found without running it.
        spec = (
            importlib.util.find_spec(f"{package}.{name}")
            if module is None
            else getattr(module, "__spec__", None)
        )
        origin = getattr(spec, "origin", None) or ""
        if not origin.endswith(suffixes):
            return False
    return True
