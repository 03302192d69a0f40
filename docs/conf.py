"""Sphinx configuration of aiowheel's documentation site.

Built with warnings as errors (``python -m sphinx -W -b html docs docs/_build/html``): a broken
cross-reference or a public name without a docstring fails the build.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# The pure-Python modules: their signatures and docstrings are what inspect can read (the
# compiled build's are C functions); both builds have the same API.
os.environ["AIOWHEEL_NO_EXTENSIONS"] = "1"

import aiowheel  # noqa: E402

project = "aiowheel"
author = "aiowheel's developers"
release = version = aiowheel.__version__
copyright = "2026, aiowheel's developers"

extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "data"]  # the raw results: linked, not pages
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist"]
html_theme = "furo"
html_title = f"aiowheel {release}"
html_static_path = ["_static"]
html_css_files = ["aiowheel.css"]
html_favicon = "_static/favicon.svg"
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
# No "Bases:" line: the bases of the public classes are private (the engine, the entry base).
autodoc_default_options = {"members": True, "undoc-members": True}
# Classes the API returns and users never construct: no constructor signature (its parameters
# are the engine's own), only the class and its methods.
NOT_CONSTRUCTED = {
    "aiowheel.TimerHandle", "aiowheel.Timeout", "aiowheel.PeriodicHandle", "aiowheel.Interval",
    "aiowheel.Watchdog", "aiowheel.TimerStats", "aiowheel.otel.Instrumentation",
}  # fmt: skip
# Names the autodoc signatures mention that live outside this site (no network for
# intersphinx here): shown as plain text, not as broken links.
nitpicky = False
suppress_warnings = ["myst.header"]  # the README-born pages start at level 2 in places


def _require_docstrings(
    app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]
) -> None:
    """Fail the strict build for a public name documented without a docstring."""
    short = name.rsplit(".", 1)[-1]
    documented_kinds = ("class", "function", "method", "module")
    if not lines and not short.startswith("_") and what in documented_kinds:
        from sphinx.util import logging

        logging.getLogger(__name__).warning(f"public name without a docstring: {name}")


# Kinds whose docstring napoleon reads as an attribute's: a first line "X: Y" becomes the type
# "X" and the description "Y" (napoleon's inline attribute type, "int: the count").
ATTRIBUTE_KINDS = ("attribute", "property", "data")


def _reject_inline_types(
    app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]
) -> None:
    """Fail the strict build for an attribute whose first line napoleon read as its type.

    Runs after napoleon (a later priority): a ``:type:`` field in what napoleon made of an
    attribute's or property's docstring came from its first line (the types are the
    annotations here, which autodoc shows in the signature). Rephrase the first line without a
    colon (a semicolon or a dash), or put the colon on a later line.
    """
    if what in ATTRIBUTE_KINDS and any(line.startswith(":type:") for line in lines):
        from sphinx.util import logging

        logging.getLogger(__name__).warning(
            f"{what} {name}: the first line of its docstring reads as 'type: description' "
            "(napoleon would show the text before the colon as its type); rephrase it "
            "without a colon"
        )


def _hide_constructor(
    app: Any, what: str, name: str, obj: Any, options: Any, signature: str | None,
    return_annotation: str | None,
) -> tuple[str, str | None] | None:  # fmt: skip
    """No signature for a class users get from the API rather than make."""
    if what in ("class", "exception") and name in NOT_CONSTRUCTED:
        return "", None
    return None


def _link_images_to_full_size(app: Any) -> None:
    """Make every image of the HTML site a link to its own full-size file.

    The plots are wider than a phone: shrunk to a 390 px column they cannot be read, so a tap
    opens the image itself. Sphinx links only the images a page resized (``:width:``); this
    wraps the others the same way, once the builder knows where it copies each image.
    """
    import posixpath

    from docutils import nodes
    from sphinx.builders.html import StandaloneHTMLBuilder

    builder = app.builder
    if not isinstance(builder, StandaloneHTMLBuilder):
        return
    process = builder.post_process_images

    def post_process_images(doctree: Any) -> None:
        process(doctree)
        for image in list(doctree.findall(nodes.image)):
            if isinstance(image.parent, nodes.reference):
                continue  # already a link (a badge, or a resized image Sphinx linked)
            uri = image["uri"]
            copied = builder.images.get(uri)
            target = uri if copied is None else posixpath.join(builder.imgpath, copied)
            link = nodes.reference("", "", internal=True, refuri=target)
            link["classes"].append("full-size")
            image.replace_self(link)
            link.append(image)

    builder.post_process_images = post_process_images  # type: ignore[method-assign]


def setup(app: Any) -> None:
    """Connect the docstring checks, the constructor hiding and the full-size image links."""
    app.connect("autodoc-process-docstring", _require_docstrings)
    app.connect("autodoc-process-docstring", _reject_inline_types, priority=900)
    app.connect("autodoc-process-signature", _hide_constructor)
    app.connect("builder-inited", _link_images_to_full_size)


autodoc_mock_imports = ["granian"]  # aiowheel.granian registers with it on import
