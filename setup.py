"""Build aiowheel: the hot modules compiled with mypyc where possible, pure Python otherwise.

Everything about the package lives in pyproject.toml; this file only adds the compiled build.
The compiled modules are the same ``.py`` sources (mypyc reads their type annotations), so there
is one implementation, plus the native core ``aiowheel/_time/_core.c`` (the callback handles, their
wheel and loop mode's ``call_at`` / ``call_later``; its reference is the pure-Python code, see
``aiowheel/_time/_core.c``). It needs nothing beyond a C compiler and Python's headers: no Cython.
(CI's memory-safety run compiles the core again under AddressSanitizer: ``.ci/asan-suite``.)
The build falls back to the pure-Python package, with one printed line and a successful
install, when:

- ``AIOWHEEL_NO_EXTENSIONS`` is set to a non-empty value other than ``0``;
- mypyc cannot generate the C code (it is a build requirement, so this means a broken mypyc);
- the C compiler is missing or fails (no ``gcc``, no ``Python.h``, ...).

``aiowheel.COMPILED`` tells at run time which build is running.
"""

from __future__ import annotations

import ast
import glob
import importlib.util
import os
import re
import sys
from collections.abc import Callable
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext


def _compiled_modules() -> list[str]:
    # The list lives in aiowheel/_common/_build.py (which the package reads to tell which build
    # runs); loaded from its file, since the package itself cannot be imported before it is built.
    spec = importlib.util.spec_from_file_location("_aiowheel_build", "aiowheel/_common/_build.py")
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    return [f"aiowheel/{name.replace('.', '/')}.py" for name in build.COMPILED_MODULES]


# Docstrings. mypyc (2.4.1 and before) writes no docstring into the C it generates: a native
# class's tp_doc, its methods' ml_doc and its module functions' hold only the text signature
# ("close($self)\n--\n\n", which CPython cuts off __doc__), and its properties' getset doc is
# NULL, so help() and inspect.getdoc() found nothing in the compiled build. No mypyc option
# keeps them, and they cannot be set afterwards: a method descriptor's and a getset's __doc__
# are read-only (only a heap type's own __doc__ is writable), and copying them at import time
# would parse the sources on every `import aiowheel`. So the build writes them where CPython
# reads them: each docstring of the sources (ast, cleaned as inspect.getdoc cleans) follows
# its signature in the generated C, before it is compiled. The runtime pays nothing, the text
# signatures stay (inspect.signature), and tests/test_build_docs.py compares inspect.getdoc of
# every public class, method and property with the pure build's. A table this pass cannot
# find (a mypyc that names or lays out its C otherwise) leaves the build as it was, said in one
# line. Non-native classes (Enum, native_class=False) are plain Python classes: mypyc gives
# them a placeholder docstring at run time, left as it is (none of them is public).

DOCSTRINGS_MARK = "/* aiowheel: the sources' docstrings added by setup.py */\n"
DOCSTRINGS_LINE = "aiowheel: docstrings not found in mypyc's C, the compiled build lacks them: {}"

# A signature-only docstring as mypyc writes it: PyDoc_STR("name(...)\n--\n\n"), or NULL.
_C_SIGNATURE = r'(?P<doc>NULL|"(?:[^"\\]|\\.)*\\n--\\n\\n")'
# {"name", (PyCFunction)CPyPy_..., METH_... , PyDoc_STR(...) /* docstring */},
_C_METHOD = re.compile(
    r'(?P<head>\{"(?P<name>\w+)",\s*\(PyCFunction\)\w+,[^{}]*?)'
    rf"PyDoc_STR\({_C_SIGNATURE}\)(?P<tail>\s*(?:/\*[^*]*\*/)?\s*)\}}"
)
# {"name", (getter)..., NULL or (setter)..., NULL /* doc */, NULL /* closure */},
_C_GETSET = re.compile(
    r'(?P<head>\{"(?P<name>\w+)",\s*\(getter\)\w+,\s*(?:NULL|\(setter\)\w+),\s*)NULL,\s*NULL\}'
)
_C_TYPE_DOC = re.compile(rf"\.tp_doc = PyDoc_STR\({_C_SIGNATURE}\)")

_Docs = dict[tuple[str, "str | None"], dict[str, str]]


def _source_docstrings(module: str, path: str) -> _Docs:
    """{(module, class, or None for the module's functions): {name: docstring}} of a source;
    a class's own docstring is under "", its properties' under "property:<name>"."""
    with open(path, encoding="utf-8") as file:
        tree = ast.parse(file.read(), path)
    docs: _Docs = {(module, None): {}}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc:
                docs[module, None][node.name] = doc
        elif isinstance(node, ast.ClassDef):
            members = docs.setdefault((module, node.name), {})
            doc = ast.get_docstring(node)
            if doc:
                members[""] = doc
            for item in node.body:
                if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                doc = ast.get_docstring(item)
                if not doc:
                    continue
                decorators = {d.id for d in item.decorator_list if isinstance(d, ast.Name)}
                prefix = "property:" if "property" in decorators else ""
                members.setdefault(prefix + item.name, doc)
    return docs


def _c_string(text: str) -> str:
    """A C string literal of ``text`` in UTF-8 (what CPython decodes a docstring from)."""
    out = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        if char in '\\"?':  # ? too: no trigraphs
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif 32 <= byte < 127:
            out.append(char)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def _with_doc(match: re.Match[str], doc: str) -> str:
    """``PyDoc_STR(<signature> <doc>)`` for a matched signature-only docstring."""
    signature = "" if match["doc"] == "NULL" else match["doc"] + " "
    return f"PyDoc_STR({signature}{_c_string(doc)})"


def _add_docstrings(c_text: str, docs: _Docs) -> str:
    """``c_text`` with each docstring of ``docs`` in its C table entry."""
    from mypyc.namegen import NameGenerator  # the C names, as mypyc made them

    names = NameGenerator([sorted({module for module, _ in docs})])
    missing: list[str] = []

    def edit(
        start: str,
        wanted: dict[str, str],
        pattern: re.Pattern[str],
        done: Callable[[re.Match[str], str], str],
    ) -> None:
        nonlocal c_text
        begin = c_text.find(start)
        end = c_text.find("};", begin)
        found: set[str] = set()

        def entry(match: re.Match[str]) -> str:
            name = match.groupdict().get("name", "")
            if name not in wanted:
                return match[0]
            found.add(name)
            return done(match, wanted[name])

        if begin >= 0:
            c_text = c_text[:begin] + pattern.sub(entry, c_text[begin:end]) + c_text[end:]
        table = start.split("[")[0].split()[-1]
        missing.extend(f"{table}.{name}" for name in wanted if name not in found)

    def method(match: re.Match[str], doc: str) -> str:
        return f"{match['head']}{_with_doc(match, doc)}{match['tail']}}}"

    def getset(match: re.Match[str], doc: str) -> str:
        return f"{match['head']}{_c_string(doc)}, NULL}}"

    def type_doc(match: re.Match[str], doc: str) -> str:
        return f".tp_doc = {_with_doc(match, doc)}"

    for (module, cls), members in docs.items():
        plain = {k: v for k, v in members.items() if k and not k.startswith("property:")}
        if cls is None:
            if plain:
                prefix = names.private_name(module)
                edit(f"static PyMethodDef {prefix}module_methods[] = {{", plain, _C_METHOD, method)
            continue
        prefix = names.private_name(module, cls)
        if f"CPyType_{prefix}_template_ = {{" not in c_text:
            continue  # not a native class: Python keeps its docstrings itself
        properties = {k[9:]: v for k, v in members.items() if k.startswith("property:")}
        if plain:
            edit(f"static PyMethodDef {prefix}_methods[] = {{", plain, _C_METHOD, method)
        if properties:
            edit(f"static PyGetSetDef {prefix}_getseters[] = {{", properties, _C_GETSET, getset)
        if "" in members:
            edit(f"CPyType_{prefix}_template_ = {{", {"": members[""]}, _C_TYPE_DOC, type_doc)
    if missing:
        print(DOCSTRINGS_LINE.format(", ".join(missing)), file=sys.stderr)
    return c_text


def _document(extensions: list[Any], sources: list[str]) -> None:
    """Write the sources' docstrings into mypyc's generated C (see _add_docstrings)."""
    docs: _Docs = {}
    for path in sources:
        docs.update(_source_docstrings(path[: -len(".py")].replace("/", "."), path))
    for ext in extensions:
        for name in ext.sources:
            if not name.endswith(".c"):
                continue
            with open(name, encoding="utf-8") as file:
                text = file.read()
            if "static PyMethodDef" not in text or text.startswith(DOCSTRINGS_MARK):
                continue  # a module's shim (no tables), or done (mypyc left the file as it was)
            with open(name, "w", encoding="utf-8") as file:
                file.write(DOCSTRINGS_MARK + _add_docstrings(text, docs))


PURE_PYTHON_LINE = "aiowheel: building the pure-Python package ({})"


def _wants_extensions() -> bool:
    return os.environ.get("AIOWHEEL_NO_EXTENSIONS", "") in ("", "0")


class OptionalBuildExt(build_ext):
    """build_ext that falls back to pure Python, cleanly, when compiling fails."""

    def run(self) -> None:
        """Build the extensions, or none of them."""
        try:
            super().run()
        except Exception as exc:  # distutils' CompileError, LinkError, OSError for no gcc...
            self._remove_partial_outputs()
            print(PURE_PYTHON_LINE.format(f"compiling failed: {exc}"), file=sys.stderr)

    def _remove_partial_outputs(self) -> None:
        # All or nothing: a shim module without its shared library would fail to import, and
        # an extension left in the source tree by an earlier build (`pip install -e`) would
        # run stale code in place of the sources this build could not compile.
        for ext in self.extensions:
            for path in (self.get_ext_fullpath(ext.name), self.get_ext_filename(ext.name)):
                if os.path.exists(path):
                    os.remove(path)


def _ext_modules() -> list[Any]:
    if not _wants_extensions():
        print(PURE_PYTHON_LINE.format("AIOWHEEL_NO_EXTENSIONS is set"), file=sys.stderr)
        return []
    try:
        from mypyc.build import mypycify
        from setuptools import Extension

        sources = _compiled_modules()
        extensions = mypycify(sources, opt_level="3", group_name="aiowheel._mypyc")
        _document(extensions, sources)
        # Exact IEEE arithmetic, as in Python (no fused multiply-add: a tick must be computed
        # exactly as aiowheel._time._driver computes it).
        core_flags = ["-O3", "-ffp-contract=off"] if os.name != "nt" else []
        extensions.append(
            Extension(
                "aiowheel._time._core",
                # One translation unit: _core.c includes the parts (see its header comment).
                ["aiowheel/_time/_core.c"],
                depends=sorted(glob.glob("aiowheel/_time/_native/*.[ch]")),
                extra_compile_args=core_flags,
            )
        )
        if sys.platform.startswith("linux"):  # an ELF notion: gcc and clang on Linux
            # Every module of the group is one C file, and its functions call one another
            # (Timer.call_later -> Driver.call -> Store.file_call; Driver._insert ->
            # Store.insert -> Wheel.insert). Without this flag each such call goes through the
            # PLT, since an exported symbol could be interposed, and none is inlined; with it
            # they are direct calls, and small ones (Driver._unfile's Store.remove) are
            # inlined: CPython builds libpython the same way (churn, paired with the same code
            # built without it, is faster by a margin well above noise).
            for ext in extensions:
                ext.extra_compile_args = [*ext.extra_compile_args, "-fno-semantic-interposition"]
        return extensions
    except Exception as exc:
        print(PURE_PYTHON_LINE.format(f"mypyc is unavailable: {exc!r}"), file=sys.stderr)
        return []


setup(ext_modules=_ext_modules(), cmdclass={"build_ext": OptionalBuildExt})
