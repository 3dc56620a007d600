"""Sphinx extension for the Ember book: C++ cells shown as C++, and pages that read offline.

Loaded by ``_config.yml`` (``sphinx: local_extensions``). Two jobs:

* A notebook's ``%%cpp NAME`` cell is C++ for the reader, but myst-nb highlights every code cell
  with the notebook's Python lexer. :class:`CppCells` finds those cells in the doctree, highlights
  them as ``cpp`` and replaces the magic line by a caption that names the part and the file in
  ``extension/csrc`` it comes from (one source of truth, see ``book.run.sync``). A ``%%py NAME``
  cell (the package's Python, ``book/parts/pycells.py``) gets the same caption, naming its file in
  ``extension/torch_ember`` (or ``chapters/history``).
* The static book has no kernel, so widgets are shown through their ``text/html`` view (see
  ``nb_mime_priority_overrides`` in ``_config.yml``). :func:`drop_remote_scripts` removes what
  myst-nb would still add to a page whose notebook carries widget state: the state itself and any
  script loaded from the network (require.js, @jupyter-widgets/html-manager). Pages load nothing
  from outside, and :func:`dedupe_scripts` keeps their console free of errors.
* myst-nb keeps every mime type of an output in the doctree until the writer picks one, so an
  ``IPython.display.Code`` output (text/html *and* text/latex) counts as an equation and Sphinx adds
  MathJax from a CDN to the page and to every page whose toctree includes it.
  :func:`forget_unshown_math` counts only the math the page will actually show.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging

from book.parts import pycells
from book.parts.cells import split_magic
from book.parts.regions import chapter_paths, slug_of
from book.run.sync import extension_regions, python_placements, python_regions

logger = logging.getLogger(__name__)

CPP_LANGUAGE = "cpp"
WIDGET_STATE_KEY = "ipywidgets_state"


def _is_code_cell_source(node: nodes.Node) -> bool:
    """The literal block myst-nb makes for a notebook code cell's input."""
    parent = node.parent
    return isinstance(parent, nodes.container) and parent.get("nb_element") == "cell_code_source"


def region_files(srcdir: Path) -> dict[str, str]:
    """Part name -> the file (relative to the book root) whose marked region the part shows."""
    csrc = srcdir / "extension" / "csrc"
    if not csrc.is_dir():
        return {}
    try:
        regions = extension_regions(csrc)
    except ValueError as error:  # broken markers: `book.run.sync --check` reports them, the book still builds
        logger.warning(
            "ember: cannot read the C++ regions: %s",
            error,
            type="ember",
            subtype="regions",
        )
        return {}
    return {name: region.path.relative_to(srcdir).as_posix() for name, region in regions.items()}


def python_region_files(srcdir: Path) -> dict[tuple[str, str], str]:
    """(chapter slug, Python region name) -> the file (relative to the book root) that holds the
    version that chapter shows: the package's for the latest, chapters/history's for earlier ones."""
    if not (srcdir / "extension" / "torch_ember").is_dir():
        return {}
    try:
        regions = python_regions(srcdir / "extension", srcdir / "chapters")
    except ValueError as error:
        logger.warning("ember: cannot read the Python regions: %s", error, type="ember", subtype="regions")
        return {}
    notebooks = chapter_paths()  # in book order: versions are numbered in it
    return {
        (part.chapter, part.name): regions[place].path.relative_to(srcdir).as_posix()
        for part, place in python_placements(pycells.chapter_parts(notebooks))
        if place in regions
    }


def cpp_caption(name: str, path: str | None, magic_name: str = "cpp", language: str = "C++") -> nodes.caption:
    """``%%cpp NAME`` · C++ · ``extension/csrc/...``: what the cell is and where its code lives."""
    magic = f"%%{magic_name} {name}"
    children: list[nodes.Node] = [
        nodes.literal(magic, magic, classes=["ember-cpp-magic"]),
        nodes.Text(f" · {language}"),
    ]
    if path is not None:
        children += [
            nodes.Text(" · "),
            nodes.literal(path, path, classes=["ember-cpp-file"]),
        ]
    text = magic + f" · {language}" + (f" · {path}" if path else "")
    return nodes.caption(text, "", *children)


class CppCells(SphinxPostTransform):
    """Highlight ``%%cpp NAME`` code cells as C++, with the magic line turned into a caption."""

    # Before myst-nb's HideInputCells (199) wraps hidden inputs; the literal block's parent is still
    # the cell's source container then.
    default_priority = 150

    def run(self, **kwargs: Any) -> None:
        files: dict[str, str] | None = None
        py_files: dict[tuple[str, str], str] | None = None
        for block in list(self.document.findall(nodes.literal_block)):
            if not _is_code_cell_source(block):
                continue
            split = split_magic(block.astext())
            py_split = None if split is not None else pycells.parse_magic(block.astext())
            if py_split is not None:
                if py_files is None:
                    py_files = python_region_files(Path(self.env.srcdir))
                name, body = py_split
                code = body.rstrip("\n")
                highlighted = nodes.literal_block(code, code, language="python", classes=["ember-py"])
                highlighted.source, highlighted.line = block.source, block.line
                wrapper = nodes.container(
                    "",
                    literal_block=True,
                    classes=["literal-block-wrapper", "ember-cpp-cell", "ember-py-cell"],
                )
                wrapper["ids"].append(nodes.make_id(f"py-{name}"))
                chapter = slug_of(Path(self.env.docname).name)
                wrapper += cpp_caption(
                    name, py_files.get((chapter, name)), magic_name=pycells.MAGIC, language="Python"
                )
                wrapper += highlighted
                block.replace_self(wrapper)
                continue
            if split is None:
                continue
            if files is None:
                files = region_files(Path(self.env.srcdir))
            name, body = split
            code = body.rstrip("\n")
            highlighted = nodes.literal_block(code, code, language=CPP_LANGUAGE, classes=["ember-cpp"])
            highlighted.source, highlighted.line = block.source, block.line
            wrapper = nodes.container(
                "",
                literal_block=True,
                classes=["literal-block-wrapper", "ember-cpp-cell"],
            )
            # An anchor per part (names are unique across the book); Sphinx wants ids on captioned code.
            wrapper["ids"].append(nodes.make_id(f"cpp-{name}"))
            wrapper += cpp_caption(name, files.get(name))
            wrapper += highlighted
            block.replace_self(wrapper)


def drop_remote_scripts(app: Sphinx, doctree: nodes.document) -> None:
    """Forget the widget state and every network script myst-nb registered for this page."""
    metadata = getattr(app.env, "nb_metadata", None)
    if not metadata or app.env.docname not in metadata:
        return
    js_files: dict[str, tuple[str | None, dict[str, str]]] = metadata[app.env.docname].get("js_files", {})
    for key, (uri, _kwargs) in list(js_files.items()):
        if key == WIDGET_STATE_KEY or (uri is not None and "://" in uri) or (uri or "").startswith("//"):
            del js_files[key]


def dedupe_scripts(
    app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any
) -> None:
    """Emit each script once.

    sphinx-thebe and sphinx-togglebutton add inline scripts after the HTML builder has started, and
    Sphinx 7.4 then lists them twice (once with filename None, once with ""): the second
    ``const THEBE_JS_URL`` is a SyntaxError in every page's console.
    """
    scripts = context.get("script_files")
    if not isinstance(scripts, list):
        return
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    unique = []
    for script in scripts:
        attributes = tuple(sorted((str(k), str(v)) for k, v in getattr(script, "attributes", {}).items()))
        key = (getattr(script, "filename", None) or "", attributes)
        if key not in seen:
            seen.add(key)
            unique.append(script)
    scripts[:] = unique  # the builder restores its own list after each page


def _shown_mime(bundle: nodes.Element, priority: list[str]) -> str | None:
    """The mime type myst-nb's SelectMimeType will keep from this output, as it decides."""
    available = [child.get("mime_type") for child in bundle.children]
    return next((mime for mime in priority if mime in available), None)


def forget_unshown_math(app: Sphinx, doctree: nodes.document) -> None:
    """A page has equations only if a math node survives the builder's choice of mime type."""
    docname = app.env.docname
    domain = app.env.get_domain("math")
    has_equations: dict[str, bool] = domain.data["has_equations"]
    if not has_equations.get(docname) or app.builder is None:
        return
    from myst_nb.core.render import get_mime_priority

    priority = get_mime_priority(app.builder.name, app.config.nb_mime_priority_overrides)

    def shown(node: nodes.Node) -> bool:
        child, parent = node, node.parent
        while parent is not None:
            in_bundle = isinstance(parent, nodes.Element) and parent.get("nb_element") == "mime_bundle"
            if in_bundle and child.get("mime_type") != _shown_mime(parent, priority):
                return False
            child, parent = parent, parent.parent
        return True

    math_nodes = doctree.findall(lambda n: isinstance(n, (nodes.math, nodes.math_block)))
    has_equations[docname] = any(shown(node) for node in math_nodes)


STATIC = Path(__file__).resolve().parent / "static"


def setup(app: Sphinx) -> dict[str, Any]:
    # The book's own stylesheet (local, like everything the pages load): colours for revision diffs.
    app.config.html_static_path.append(str(STATIC))
    app.add_css_file("ember-book.css")
    app.add_post_transform(CppCells)
    app.connect("doctree-read", drop_remote_scripts)
    app.connect("doctree-read", forget_unshown_math)
    app.connect("html-page-context", dedupe_scripts, priority=900)  # after every extension added its own
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
