"""The documentation site builds strictly, and its pages render in a real headless browser;
and, in the default run, no docstring renders a command as a block quote.

The browser tests need the ``docs`` extra and a Chromium (Debian's ``chromium``; ``.ci/run``
installs it), so they are marked ``browser`` and left out of the default run:
``pytest -m browser tests/integration/test_docs.py``.
The site is built with warnings as errors (a broken cross-reference, or a public name without
a docstring, fails it), served on 127.0.0.1, and opened with Playwright driving that Chromium:
the index, the API page and a search must render without a console error.
"""

from __future__ import annotations

import functools
import http.server
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.house import rooms
from tests.support import ROOT, grpc_installed

CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         str(ROOT / "docs"), str(out)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.browser
def test_every_public_name_has_an_entry_in_the_api_page(site: Path) -> None:
    import aiowheel
    import aiowheel.loops

    html = (site / "api.html").read_text()
    names = [f"aiowheel.{name}" for name in aiowheel.__all__]
    names += [f"aiowheel.loops.{name}" for name in aiowheel.loops.__all__]
    assert [name for name in names if f'id="{name}"' not in html] == []


@pytest.mark.parametrize(
    ("page", "expect"),
    [
        ("index.html", "hierarchical timing wheel"),
        ("api.html", "aiowheel.Timer"),
        ("search.html?q=reschedule", "Timeout.reschedule"),
    ],
)
@pytest.mark.browser
def test_pages_render_without_console_errors(
    served: str, page: str, expect: str, tmp_path: Path
) -> None:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "no chromium on PATH: apt-get install chromium (as .ci/run does)"
    errors: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        try:
            tab = browser.new_page()
            tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            tab.on("pageerror", lambda exc: errors.append(str(exc)))
            tab.goto(f"{served}/{page}", wait_until="networkidle")
            if page.startswith("search"):
                tab.wait_for_selector("#search-results li", timeout=15_000)
            assert expect in tab.inner_text("body")
            tab.screenshot(path=str(tmp_path / "page.png"), full_page=False)
        finally:
            browser.close()
    assert errors == []
    assert (tmp_path / "page.png").stat().st_size > 1000


WIDTHS = (1280, 390)  # a laptop, a phone

# Per page, in the browser: how far the page is wider than the window; code-like text holding an
# en dash; each table of the article (its box against the article's, its content against its
# box, and whether it scrolls); each image of the article and the link around it, if any.
LAYOUT_JS = """() => {
  const article = document.querySelector('article');
  const right = article ? article.getBoundingClientRect().right : window.innerWidth;
  const tables = [...document.querySelectorAll('article table')].map(t => ({
    head: t.innerText.slice(0, 50).replace(/\\s+/g, ' '),
    beyond: Math.max(t.getBoundingClientRect().right,
                     t.parentElement.getBoundingClientRect().right) - right,
    hidden: t.scrollWidth - t.clientWidth,
    scrolls: ['auto', 'scroll'].includes(getComputedStyle(t).overflowX),
  }));
  const images = [...document.querySelectorAll('article img')].map(img => ({
    src: img.src, href: img.closest('a') ? img.closest('a').href : null,
  }));
  return {
    overflow: document.documentElement.scrollWidth - window.innerWidth,
    dashed: [...document.querySelectorAll('code, pre, kbd')]
      .map(e => e.innerText).filter(t => t.includes('\u2013')),
    tables, images,
  };
}"""


@pytest.fixture(scope="module")
def layout(served: str, site: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """Every page of the site loaded once at each width of WIDTHS: what LAYOUT_JS saw."""
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "no chromium on PATH: apt-get install chromium (as .ci/run does)"
    shots = ROOT / "docs" / "_build" / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    pages = sorted(
        path.name
        for path in site.glob("*.html")
        if path.name not in ("genindex.html", "search.html", "py-modindex.html")
    )
    seen: dict[tuple[str, int], dict[str, Any]] = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        try:
            for width in WIDTHS:
                tab = browser.new_page(viewport={"width": width, "height": 900})
                for page in pages:
                    tab.goto(f"{served}/{page}", wait_until="load")
                    seen[page, width] = tab.evaluate(LAYOUT_JS)
                    if page in ("index.html", "quickstart.html", "api.html", "performance.html"):
                        tab.screenshot(path=str(shots / f"{page[:-5]}-{width}.png"))
                tab.close()
        finally:
            browser.close()
    return seen


@pytest.mark.browser
def test_no_page_scrolls_sideways_and_no_code_holds_an_en_dash(
    layout: dict[tuple[str, int], dict[str, Any]],
) -> None:
    # At a laptop's and a phone's width, a page is never wider than the window: wide code
    # blocks and tables scroll inside their own box. And no code-like text holds an en dash
    # (a "--" that typography turned into one no longer pastes as an option).
    wide = [
        f"{page} at {width} px: {seen['overflow']} px too wide"
        for (page, width), seen in layout.items()
        if seen["overflow"] > 1
    ]
    dashed = [
        f"{page}: {text[:60]!r}"
        for (page, width), seen in layout.items()
        if width == WIDTHS[0]
        for text in seen["dashed"]
    ]
    assert not wide, wide
    assert not dashed, dashed


@pytest.mark.browser
def test_no_table_is_cut(layout: dict[tuple[str, int], dict[str, Any]]) -> None:
    # No table (nor its wrapper) reaches past the text column; at a laptop's width every
    # column shows without scrolling; at a phone's, a wider table scrolls in its own box.
    assert len(layout) >= 2 * 20 and any(seen["tables"] for seen in layout.values())
    cut = []
    for (page, width), seen in layout.items():
        for table in seen["tables"]:
            where = f"{page} at {width} px, the table {table['head']!r}"
            if table["beyond"] > 1:
                cut.append(f"{where}: {table['beyond']:.0f} px past the text column")
            if width == 1280 and table["hidden"] > 1:
                cut.append(f"{where}: {table['hidden']} px of columns hidden")
            if table["hidden"] > 1 and not table["scrolls"]:
                cut.append(f"{where}: wider than its box and does not scroll")
    assert not cut, cut


@pytest.mark.browser
def test_every_figure_links_to_its_full_size_image(
    layout: dict[tuple[str, int], dict[str, Any]],
) -> None:
    # A plot shrunk to a phone's column cannot be read: a tap opens the image itself.
    images = [(page, image) for (page, width), seen in layout.items() for image in seen["images"]]
    assert len(images) >= 2 * 8, images  # the site does show its figures
    unlinked = [
        f"{page}: {image['src']}" for page, image in images if image["href"] != image["src"]
    ]
    assert not unlinked, unlinked


def _docstrings() -> Iterator[tuple[str, str]]:
    """(name, docstring) of every module of the package and every public name the API page
    shows, methods and properties included."""
    import importlib
    import inspect

    import aiowheel

    for room, path in rooms().items():  # the faces and every room of the folders
        if path.suffix != ".py":
            continue
        name = "aiowheel" if room == "__init__" else f"aiowheel.{room}"
        if name in ("aiowheel.gunicorn", "aiowheel.granian"):
            pytest.importorskip(name.rpartition(".")[2])  # the servers' own packages
        if name.endswith("grpc") and not grpc_installed():
            continue  # no grpcio wheel for this interpreter (3.14t): CI requires it elsewhere
        module = importlib.import_module(name)
        yield name, inspect.getdoc(module) or ""
    for public in aiowheel.__all__:
        obj = getattr(aiowheel, public)
        yield f"aiowheel.{public}", inspect.getdoc(obj) or ""
        if inspect.isclass(obj):
            for member, value in vars(obj).items():
                if not member.startswith("_") and (doc := inspect.getdoc(value)):
                    yield f"aiowheel.{public}.{member}", doc


def test_no_docstring_renders_a_command_as_a_block_quote() -> None:
    # An indented command after a paragraph that does not end in "::" is a block quote in
    # reStructuredText: Sphinx joins its lines and turns "--" into an en dash, and the command
    # no longer pastes. Every indented block in these docstrings is meant as code.
    from docutils import nodes
    from docutils.core import publish_doctree

    quoted = []
    for name, doc in _docstrings():
        tree = publish_doctree(doc, settings_overrides={"report_level": 5, "halt_level": 5})
        for quote in tree.findall(nodes.block_quote):
            quoted.append(f"{name}: {quote.astext()[:80]!r}")
    assert not quoted, "block quotes (a missing '::'?):\n" + "\n".join(quoted)


def test_every_result_file_the_docs_name_exists_under_docs_data() -> None:
    # The README names results from the root (docs/data/...), the pages from docs/ (data/...),
    # in links, images and backticks, with globs for a series; each must match a file.
    named: list[tuple[str, str]] = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for path in re.findall(r"(?:docs/)?data/[\w.*/-]+\.(?:json|png)", page.read_text()):
            named.append((page.name, path if path.startswith("docs/") else f"docs/{path}"))
    assert len(named) >= 10, named  # the pages do quote results
    missing = [(page, path) for page, path in named if not list(ROOT.glob(path))]
    assert not missing, missing
    loose = sorted(p.name for p in (ROOT / "docs").glob("*") if p.suffix in (".json",))
    assert not loose, f"results outside docs/data: {loose}"


@pytest.mark.once
def test_the_readme_is_short_names_both_builds_and_links_its_figures() -> None:
    # The README takes a newcomer from install to a server in one screenful or two; it says
    # which build runs (the compiled modules, the native core); and each of its images is a
    # link to the image itself, readable at full size from a phone.
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    assert "aiowheel.COMPILED" in text and "aiowheel.NATIVE" in text
    images = re.findall(r"(\[?)!\[[^\]]*\]\(([^)]+)\)(\]\(([^)]+)\))?", text)
    assert images
    assert [src for bracket, src, _, href in images if not bracket or href != src] == []
