"""The rendered book: it builds without a warning, shows C++ as C++, and reads offline.

The book is built once for this module with the command `make book` uses (`-W --keep-going`), into
a temporary folder, then its chapter pages are opened from disk in headless Chromium with the
network cut off. Chromium and its driver are Debian packages (`chromium`, `chromium-driver`);
.ci/run installs them.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pytest
from chromium import start_chromium
from docutils.nodes import make_id

from book.parts.cells import split_magic

ROOT = Path(__file__).resolve().parents[2]
JUPYTER_BOOK = Path(sys.executable).with_name("jupyter-book")

WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE_MIME = "application/vnd.jupyter.widget-state+json"
DISPATCH_CELL = ".ember-dispatch-table td.ember-cell"
TRACE_ROW = ".ember-trace .ember-trace-row"
CPP_CODE = "div.highlight-cpp pre"
# Chapter 16's pictures: a profile's timeline bars, a snapshot's segments and its memory over time.
TIMELINE_BAR = ".ember-timeline .ember-span"
MEMORY_SEGMENT = ".ember-memory .ember-segment"
MEMORY_COLUMNS = ".ember-memory .ember-columns"
REMOTE_HINTS = (
    "cdn",
    "unpkg",
    "jsdelivr",
    "cloudflare",
    "googleapis",
    "require.js",
    "html-manager",
)
LOCAL_SCHEMES = {"file", "data", "blob", "about", "chrome", "devtools"}


@dataclass(frozen=True)
class Build:
    html: Path
    log: str
    seconds: float

    def page(self, docname: str) -> Path:
        return self.html / f"{docname}.html"


def toc_docnames() -> list[str]:
    """Every page in _toc.yml (root and chapters), in order, without suffix."""
    return re.findall(
        r"^\s*(?:root|-\s*file):\s*(\S+)\s*$",
        (ROOT / "_toc.yml").read_text(),
        re.MULTILINE,
    )


def notebook_docnames() -> list[str]:
    return [name for name in toc_docnames() if (ROOT / f"{name}.ipynb").is_file()]


def cpp_parts(docname: str) -> list[str]:
    """Names of the `%%cpp NAME` cells of a chapter notebook, in order."""
    notebook = json.loads((ROOT / f"{docname}.ipynb").read_text())
    names = []
    for cell in notebook["cells"]:
        split = split_magic("".join(cell["source"])) if cell["cell_type"] == "code" else None
        if split:
            names.append(split[0])
    return names


def build_report(build: Build) -> str:
    """The build's output and any report files it left, for a failure message."""
    reports = sorted(build.html.glob("reports/**/*.*")) if build.html.is_dir() else []
    text = "\n".join(f"--- {path}\n{path.read_text(errors='replace')}" for path in reports)
    return f"jupyter-book build output:\n{build.log}\n{text}"


@pytest.fixture(scope="module")
def book_build(tmp_path_factory: pytest.TempPathFactory) -> Build:
    out = tmp_path_factory.mktemp("book")
    command = [
        str(JUPYTER_BOOK),
        "build",
        str(ROOT),
        "-W",
        "--keep-going",
        "--builder",
        "html",
    ]
    command += ["--path-output", str(out)]
    start = time.perf_counter()
    done = subprocess.run(command, check=False, capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - start
    print(f"jupyter-book build: {seconds:.1f} s")
    build = Build(out / "_build" / "html", done.stdout + done.stderr, seconds)
    if done.returncode != 0:
        pytest.fail(
            f"jupyter-book build failed (exit {done.returncode})\n{build_report(build)}",
            pytrace=False,
        )
    return build


def test_book_builds_without_warnings(book_build: Build) -> None:
    warnings = [line for line in book_build.log.splitlines() if re.search(r"\bWARNING\b", line)]
    assert not warnings, "the book build warns:\n" + "\n".join(warnings) + "\n\n" + build_report(book_build)
    assert "build finished with problems" not in book_build.log, build_report(book_build)
    for docname in toc_docnames():
        assert book_build.page(docname).is_file(), f"{docname} is in _toc.yml but was not rendered"


def test_cpp_cells_are_highlighted_as_cpp(book_build: Build) -> None:
    shown = {docname: cpp_parts(docname) for docname in notebook_docnames()}
    assert any(shown.values()), "no chapter has a %%cpp cell: chapter 01 shows the allocator's C++"
    problems = []
    for docname, parts in shown.items():
        html = book_build.page(docname).read_text()
        blocks = html.count('class="ember-cpp highlight-cpp')
        if blocks != len(parts):
            problems.append(f"{docname}: {len(parts)} %%cpp cells but {blocks} C++ code blocks")
        # The magic line becomes the block's caption (with the file the code comes from) and an anchor.
        problems += [
            f"{docname}: no anchor #cpp-{name}" for name in parts if f'id="{anchor(name)}"' not in html
        ]
        python_blocks = re.findall(r'<div class="highlight-ipython3.*?</pre>', html, re.DOTALL)
        if any("%%cpp" in block for block in python_blocks):
            problems.append(f"{docname}: a %%cpp cell is highlighted as Python")
    assert not problems, "\n".join(problems)


def anchor(part: str) -> str:
    return make_id(f"cpp-{part}")


def test_widgets_render_as_static_html(book_build: Build) -> None:
    problems = []
    for docname in toc_docnames():
        html = book_build.page(docname).read_text()
        for mime in (WIDGET_VIEW_MIME, WIDGET_STATE_MIME):
            if mime in html:
                problems.append(
                    f"{docname}: the page embeds {mime}; the static book shows the text/html view"
                )
        urls = re.findall(r"<(?:script|link|img|iframe)\b[^>]*(?:src|href)=\"([^\"]+)\"", html)
        remote = [
            url for url in urls if "://" in url or url.startswith("//") or any(h in url for h in REMOTE_HINTS)
        ]
        if remote:
            problems.append(f"{docname}: the page loads from the network: {remote}")
    assert not problems, "\n".join(problems)


# --- the pages in a browser, offline ------------------------------------------------------------


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    driver = start_chromium(
        tmp_path_factory.mktemp("chromium-profile"),
        [
            # The network is cut: no name resolves and every proxied request goes nowhere.
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--proxy-server=127.0.0.1:9",
            "--window-size=1280,900",
        ],
        {"goog:loggingPrefs": {"performance": "ALL", "browser": "ALL"}},
    )
    try:
        yield driver
    finally:
        driver.quit()


def requested_urls(driver: object) -> list[str]:
    """Every URL the page asked the network for since the last call (Chrome's performance log)."""
    urls = []
    for entry in driver.get_log("performance"):  # type: ignore[attr-defined]
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def shown(elements: list[object]) -> list[object]:
    """The elements a reader sees: displayed, with a non-zero box."""
    return [e for e in elements if e.is_displayed() and e.size["width"] > 0 and e.size["height"] > 0]  # type: ignore[attr-defined]


def test_pages_read_offline_in_chromium(book_build: Build, browser: object, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    driver = browser
    seen = {
        DISPATCH_CELL: 0,
        TRACE_ROW: 0,
        CPP_CODE: 0,
        TIMELINE_BAR: 0,
        MEMORY_SEGMENT: 0,
        MEMORY_COLUMNS: 0,
    }
    problems: list[str] = []
    for docname in toc_docnames():
        known = len(problems)
        page = book_build.page(docname)
        driver.get(page.as_uri())  # type: ignore[attr-defined]
        for entry in driver.get_log("browser"):  # type: ignore[attr-defined]
            # Script errors and failed loads; the theme's console.error chatter is not a page error.
            if entry["level"] == "SEVERE" and entry.get("source") in (
                "javascript",
                "network",
            ):
                problems.append(f"{docname}: browser console: {entry['message']}")
        remote = [url for url in requested_urls(driver) if urlparse(url).scheme not in LOCAL_SCHEMES]
        if remote:
            problems.append(f"{docname}: requests to the network: {remote}")
        scripts = driver.find_elements(By.CSS_SELECTOR, "script[src], link[href]")  # type: ignore[attr-defined]
        for element in scripts:
            url = element.get_attribute("src") or element.get_attribute("href") or ""
            if any(hint in url for hint in REMOTE_HINTS) or not url.startswith(("file:", "data:", "#")):
                problems.append(f"{docname}: loads {url}")
        html = page.read_text()
        if "dropdown" in html:
            problems += _open_dropdowns(driver, docname)
        for selector in seen:
            present, missing = driver.execute_script(_COUNT_HIDDEN, selector)  # type: ignore[attr-defined]
            seen[selector] += present
            if missing:
                problems.append(f"{docname}: {missing} of {present} '{selector}' not shown")
        if "tag_hide-input" in html:
            problems += _check_collapsed_inputs(driver, docname)
        if len(problems) > known:
            driver.save_screenshot(str(tmp_path / f"{docname.replace('/', '_')}.png"))  # type: ignore[attr-defined]
    for selector, count in seen.items():
        if count == 0:
            problems.append(f"no page of the book shows '{selector}'")
    assert not problems, "\n".join(problems) + f"\n(screenshots in {tmp_path})"


def _open_dropdowns(driver: object, docname: str) -> list[str]:
    """Exercise solutions (sphinx-exercise `:class: dropdown`) start collapsed and open on a click.

    Opens them all, so that the visibility checks after this see what a reader sees once they click.
    """
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    problems = []
    for admonition in driver.find_elements(By.CSS_SELECTOR, "div.admonition.dropdown"):  # type: ignore[attr-defined]
        label = admonition.get_attribute("id") or "a dropdown"
        if "toggle-hidden" not in (admonition.get_attribute("class") or ""):
            problems.append(f"{docname}: {label} is not collapsed when the page opens")
            continue
        button = admonition.find_element(By.CSS_SELECTOR, "button.toggle-button")
        driver.execute_script("arguments[0].scrollIntoView(); arguments[0].click();", button)  # type: ignore[attr-defined]
        try:
            opened = admonition  # bound now: the lambda runs while the loop waits
            WebDriverWait(driver, 5).until(
                lambda _, a=opened: "toggle-hidden" not in a.get_attribute("class")
            )
        except TimeoutException:
            problems.append(f"{docname}: {label} does not open on a click")
    return problems


# [elements matching the selector, those a reader cannot see]: not rendered (no box, no
# client rects, as inside a display:none ancestor) or invisible, unless inside a collapsed
# <details> (a collapsed solution: the click check opens those). One script per selector:
# a WebDriver round trip per element made this test take minutes.
_COUNT_HIDDEN = """
const elements = document.querySelectorAll(arguments[0]);
let hidden = 0;
for (const e of elements) {
  const box = e.getBoundingClientRect();
  const style = getComputedStyle(e);
  const seen = e.getClientRects().length > 0 && box.width > 0 && box.height > 0
    && style.visibility !== "hidden" && style.opacity !== "0";
  const details = e.closest("details");
  if (!seen && !(details !== null && !details.open)) hidden += 1;
}
return [elements.length, hidden];
"""


def _check_collapsed_inputs(driver: object, docname: str) -> list[str]:
    """Solutions (`hide-input` cells) start collapsed and open on a click."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    problems = []
    for cell in driver.find_elements(By.CSS_SELECTOR, "div.cell.tag_hide-input"):  # type: ignore[attr-defined]
        details = cell.find_elements(By.CSS_SELECTOR, "details.hide")
        if not details:
            problems.append(f"{docname}: a hide-input cell is not collapsible")
            continue
        code = cell.find_element(By.CSS_SELECTOR, ".cell_input pre")
        if code.is_displayed():
            problems.append(f"{docname}: a hide-input cell is shown expanded")
        summary = details[0].find_element(By.TAG_NAME, "summary")
        # A real click, in the middle of the window: at the top the theme's sticky header would take it.
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", summary)  # type: ignore[attr-defined]
        summary.click()
        try:  # the theme animates the opening
            WebDriverWait(driver, 5).until(lambda _, code=code: shown([code]))
        except TimeoutException:
            problems.append(f"{docname}: a hide-input cell does not open on a click")
    return problems


def test_a_revised_part_is_shown_as_a_diff(book_build: Build) -> None:
    # Chapter 03 shows cpu_fallback twice; the second cell's output is its diff against the first.
    html = book_build.page("chapters/03_fallback").read_text()
    diffs = re.findall(r'<div class="highlight-diff.*?</pre>', html, re.DOTALL)
    assert len(diffs) == 1, "the cpu_fallback revision should render as one highlighted diff"
    text = re.sub(r"<[^>]+>", "", diffs[0])
    assert "03_fallback.ipynb[cpu_fallback] version 1" in text
    assert "+std::vector&lt;FallbackCheck&gt;&amp; fallbackChecks() {" in text


def test_the_visibility_count_finds_hidden_elements_but_not_collapsed_ones(
    browser: object, tmp_path: Path
) -> None:
    page = tmp_path / "page.html"
    page.write_text(
        '<pre class="x">shown</pre><pre class="x" style="display:none">hidden</pre>'
        '<div style="visibility:hidden"><pre class="x">invisible</pre></div>'
        '<details><summary>s</summary><pre class="x">collapsed</pre></details>'
    )
    browser.get(page.as_uri())  # type: ignore[attr-defined]
    assert browser.execute_script(_COUNT_HIDDEN, "pre.x") == [4, 2]  # type: ignore[attr-defined]
