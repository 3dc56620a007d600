"""The reader's path: the chapters run in a real JupyterLab, driven through its UI by headless Chromium.

JupyterLab is started as `make lab` starts it (EMBER_BOOK_BATCH=0, TORCH_DEVICE_BACKEND_AUTOLOAD=0),
on a free loopback port, with its own empty config, data, runtime, settings and workspace folders, so
the notebooks open untrusted, as in a fresh clone. It serves copies of the chapters in a temporary
folder: nothing it runs touches chapters/. For each chapter the test opens the notebook, clicks
Run ▸ Run All Cells, waits for the kernel, saves the copy (File ▸ Save Notebook: on the page an error
and a stream on stderr look alike, the saved file tells them apart) and fails on any error output in a
cell not tagged ``raises-exception`` and on any cell Run All did not reach. It also checks that the saved widgets show styled before anything runs
(JupyterLab's sanitizer drops <style> blocks from untrusted outputs) and that the live dispatch-table
widget answers its controls. Before anything runs it also opens chapter 01 and checks that it reads as
the book does: its MyST exercises and solutions rendered by jupyterlab-myst (not literal ``:::``), its
``%%cpp`` cells highlighted as C++ by the book's own extension (``labextension/``), its ``%%py`` cells
as Python. Chromium and its driver are Debian's (`chromium`, `chromium-driver`).

Run it alone (`make test` does, after the chapters' nbval run, when their builds are cached):
    TORCH_DEVICE_BACKEND_AUTOLOAD=0 .venv/bin/python -m pytest -p no:cacheprovider \
        tests/chapters/test_lab_live.py
EMBER_LAB_TEST_CHAPTERS=DIR takes the notebooks from DIR instead of chapters/ (e.g. executed copies).
EMBER_LAB_TEST_ALL=1 runs every chapter, not only 02 and 13 (about 15 min with the builds cached).
EMBER_LAB_SCREENSHOTS=DIR saves a screenshot of each cell the markup test looks at, to look at.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from chromium import start_chromium

ROOT = Path(__file__).resolve().parents[2]
JUPYTER = Path(sys.executable).with_name("jupyter")
SOURCE = Path(os.environ.get("EMBER_LAB_TEST_CHAPTERS") or ROOT / "chapters")
CHAPTERS = (
    sorted(path.name for path in SOURCE.glob("[0-9]*.ipynb"))
    if os.environ.get("EMBER_LAB_TEST_ALL") == "1"
    else ["02_minimal_ops.ipynb", "13_renaming.ipynb"]
)
WIDGET_CHAPTER = "02_minimal_ops.ipynb"  # its dispatch tables get the live controls
MARKUP_CHAPTER = "01_allocator.ipynb"  # opened, not run: exercises, solutions, %%cpp and %%py cells
SCREENSHOTS = os.environ.get("EMBER_LAB_SCREENSHOTS")
# C++ keywords that are plain names in Python: highlighted as keywords only if the cell is C++.
CPP_ONLY_KEYWORDS = {
    "namespace",
    "struct",
    "const",
    "constexpr",
    "static",
    "override",
    "noexcept",
    "template",
}
START_TIMEOUT = 60  # s, JupyterLab's server up
RUN_TIMEOUT = 240  # s per chapter (a warm cache runs each in well under a minute)

# JupyterLab settings for a test run: every cell in the DOM (no windowing), no autosave, nothing fetched.
SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
}

# Each cell on the page, in notebook order: is it code, and its prompt ("[*]:" while queued or running).
CELLS_JS = """
return Array.from(document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell'))
  .map(cell => ({
    code: cell.classList.contains('jp-CodeCell'),
    prompt: (cell.querySelector('.jp-InputArea-prompt') || {}).textContent || '',
  }));
"""
KERNEL_JS = """
const s = document.querySelector(
  '.jp-NotebookPanel:not(.lm-mod-hidden) [data-jp-item-name="executionProgress"]');
return s ? s.textContent : '';
"""


@dataclass
class Lab:
    url: str
    folder: Path
    process: subprocess.Popen[bytes]
    log: Path

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    tmp = tmp_path_factory.mktemp("lab")
    folder = tmp / "chapters"
    folder.mkdir()
    for name in [*CHAPTERS, MARKUP_CHAPTER]:
        shutil.copy(SOURCE / name, folder / name)
    settings = tmp / "settings"
    for path, value in SETTINGS.items():
        (settings / path).parent.mkdir(parents=True, exist_ok=True)
        (settings / path).write_text(json.dumps(value))
    env = dict(
        os.environ,
        EMBER_BOOK_BATCH="0",
        TORCH_DEVICE_BACKEND_AUTOLOAD="0",
        JUPYTER_CONFIG_DIR=str(tmp / "config"),
        JUPYTER_DATA_DIR=str(tmp / "data"),  # its own notebook signatures: every chapter opens untrusted
        JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
    )
    port = free_port()
    command = [
        str(JUPYTER),
        "lab",
        str(folder),
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        "--ServerApp.port_retries=0",
        "--IdentityProvider.token=",
        "--ServerApp.password=",
        "--ServerApp.disable_check_xsrf=True",  # the test's own REST calls (loopback, no token)
        f"--LabApp.user_settings_dir={settings}",
        f"--LabApp.workspaces_dir={tmp / 'workspaces'}",
        "--LabApp.news_url=",
    ]
    if os.geteuid() == 0:
        command.append("--allow-root")
    log = tmp / "jupyterlab.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    lab = Lab(f"http://127.0.0.1:{port}", folder, process, log)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                urllib.request.urlopen(f"{lab.url}/api/status", timeout=2)
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not start:\n{lab.log_tail()}", pytrace=False)
                time.sleep(0.3)
        yield lab
    finally:
        # SIGTERM: the server shuts its kernels down; then the whole session, in case one lingers.
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    driver = start_chromium(tmp_path_factory.mktemp("chromium-profile"), ["--window-size=1280,1000"])
    driver.implicitly_wait(0)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(condition, timeout: float, what: str, interval: float = 0.5):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def notebook_cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def open_notebook(driver, lab: Lab, name: str) -> None:  # type: ignore[no-untyped-def]
    """Open `name` alone (a reset workspace: no tab of an earlier chapter), and wait for its kernel."""
    driver.get(f"{lab.url}/lab/tree/{name}?reset")
    expected = len(notebook_cells(lab.folder / name))
    wait_for(
        lambda: len(driver.execute_script(CELLS_JS)) == expected,
        60,
        f"{name} to show its {expected} cells",
    )
    wait_for(lambda: "Idle" in driver.execute_script(KERNEL_JS), 60, f"{name}'s kernel to start")


def click_menu(driver, menu: str, command: str) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    items = driver.find_elements(By.CSS_SELECTOR, ".lm-MenuBar-item")
    next(item for item in items if item.text.strip() == menu).click()
    wait_for(
        lambda: driver.find_elements(By.CSS_SELECTOR, f'.lm-Menu-item[data-command="{command}"]'),
        10,
        f"the menu item {command}",
        interval=0.1,
    )[0].click()


def save(driver, lab: Lab, name: str) -> list[dict]:  # type: ignore[no-untyped-def]
    """File ▸ Save Notebook (the copy in the temporary folder), and the cells as saved.

    The saved file says exactly which output is an error: on the page an error and a stream on
    stderr are rendered alike.
    """
    path = lab.folder / name
    before = path.stat().st_mtime_ns
    click_menu(driver, "File", "docmanager:save")
    wait_for(lambda: path.stat().st_mtime_ns != before, 30, f"{name} to be saved")
    return wait_for(lambda: _read_cells(path), 10, f"{name} to be readable")


def _read_cells(path: Path) -> list[dict] | None:
    try:
        return notebook_cells(path)
    except ValueError:  # still being written
        return None


def run_all(driver, lab: Lab, name: str) -> tuple[list[dict], float]:  # type: ignore[no-untyped-def]
    """Run ▸ Run All Cells, then wait until no cell is queued or running and the kernel is idle."""
    start = time.monotonic()
    click_menu(driver, "Run", "runmenu:run-all")  # Run ▸ Run All Cells
    wait_for(
        lambda: any("[*]" in c["prompt"] for c in driver.execute_script(CELLS_JS)), 30, "Run All to start"
    )

    def settled() -> list[dict] | None:
        cells = driver.execute_script(CELLS_JS)
        if any("[*]" in c["prompt"] for c in cells):
            return None
        if "Idle" not in driver.execute_script(KERNEL_JS):
            return None
        return cells

    cells = wait_for(settled, RUN_TIMEOUT, f"{name} to finish running", interval=1.0)
    return cells, time.monotonic() - start


def test_saved_widgets_show_styled_in_an_untrusted_notebook(browser, lab: Lab) -> None:  # type: ignore[no-untyped-def]
    """Before anything runs: the saved dispatch tables have their colours, though untrusted."""
    driver = browser
    open_notebook(driver, lab, WIDGET_CHAPTER)
    styled = driver.execute_script(
        """
        const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
        return Array.from(panel.querySelectorAll('.ember-dispatch-table td.ember-cell')).map(td => [
          td.className, getComputedStyle(td).backgroundColor, getComputedStyle(td).borderTopWidth]);
        """
    )
    assert styled, f"{WIDGET_CHAPTER} shows no saved dispatch table"
    with urllib.request.urlopen(f"{lab.url}/api/contents/{WIDGET_CHAPTER}", timeout=10) as answer:
        content = json.load(answer)["content"]
    trusted = [c["metadata"].get("trusted") for c in content["cells"] if c["cell_type"] == "code"]
    assert not any(trusted), "the notebook opened trusted: this test must see what a fresh clone shows"
    kernels = [cell for cell in styled if "ember-kernel" in cell[0].split()]
    assert kernels and all(bg not in ("rgba(0, 0, 0, 0)", "transparent") for _, bg, _ in kernels), kernels
    assert all(border == "1px" for _, _, border in styled), "the table's borders were stripped"


# What a cell's input shows: the editor's language and each highlighted token with its style, and the
# styles JupyterLab's highlighting gives comments and keywords (its theme's variables, read off a probe).
EDITOR_JS = """
const cell = arguments[0];
const content = cell.querySelector('.jp-InputArea-editor .cm-content');
if (!content) { return null; }
const probe = name => {
  const span = document.createElement('span');
  span.style.color = `var(${name})`;
  cell.appendChild(span);
  const color = getComputedStyle(span).color;
  span.remove();
  return color;
};
const tokens = Array.from(content.querySelectorAll('.cm-line span')).map(span => {
  const style = getComputedStyle(span);
  return {text: span.textContent, line: span.closest('.cm-line').textContent,
          color: style.color, italic: style.fontStyle === 'italic', bold: Number(style.fontWeight) >= 600};
});
return {language: content.dataset.language || '', tokens: tokens,
        comment: probe('--jp-mirror-editor-comment-color'),
        keyword: probe('--jp-mirror-editor-keyword-color')};
"""
# A Markdown cell as rendered: its text, and jupyterlab-myst's exercise boxes (shown or hidden).
MARKDOWN_JS = """
const cell = arguments[0];
const rendered = cell.querySelector('.myst, .jp-RenderedMarkdown');
if (!rendered) { return null; }
return {text: rendered.innerText,
        boxes: Array.from(rendered.querySelectorAll('.myst-exercise')).map(box => ({
          tag: box.tagName.toLowerCase(), shown: box.getClientRects().length > 0,
          title: (box.querySelector('.myst-exercise-title') || {}).textContent || ''}))};
"""


def cell_element(driver, index: int):  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    cells = driver.find_elements(
        By.CSS_SELECTOR, ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell"
    )
    return cells[index]


def look_at(driver, index: int, script: str, what: str, ready=bool):  # type: ignore[no-untyped-def]
    """Scroll cell `index` into view (its editor and Markdown render what is in view) and read it."""
    element = cell_element(driver, index)

    def read():  # type: ignore[no-untyped-def]
        driver.execute_script("arguments[0].scrollIntoView()", element)
        value = driver.execute_script(script, element)
        return value if value is not None and ready(value) else None

    value = wait_for(read, 20, what, interval=0.3)
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        element.screenshot(str(Path(SCREENSHOTS) / f"{Path(MARKUP_CHAPTER).stem}-cell{index}.png"))
    return value


def test_markup_and_cpp_cells_show_as_in_the_book(browser, lab: Lab) -> None:  # type: ignore[no-untyped-def]
    """Chapter 01 opened as a reader opens it: MyST exercises rendered, C++ cells highlighted as C++."""
    driver = browser
    open_notebook(driver, lab, MARKUP_CHAPTER)
    cells = notebook_cells(lab.folder / MARKUP_CHAPTER)
    sources = ["".join(cell["source"]) for cell in cells]

    # MyST: exercises are boxes titled "Exercise", a solution's start is its (folded) header, its end
    # is hidden, and no directive's ::: is left in the text.
    markdown = [i for i, cell in enumerate(cells) if cell["cell_type"] == "markdown" and ":::{" in sources[i]]
    kinds = {"exercise": 0, "solution-start": 0, "solution-end": 0}
    for index in markdown:
        rendered = look_at(driver, index, MARKDOWN_JS, f"Markdown cell {index} to render")
        assert ":::" not in rendered["text"], (
            f"cell {index} shows MyST markup as text (is jupyterlab-myst installed? `make setup`):\n"
            + rendered["text"][:300]
        )
        for kind in kinds:
            if f":::{{{kind}}}" in sources[index]:
                kinds[kind] += 1
                shown = [box for box in rendered["boxes"] if box["shown"]]
                if kind == "exercise":
                    assert any(b["tag"] == "aside" and b["title"].startswith("Exercise") for b in shown), (
                        rendered
                    )
                elif kind == "solution-start":
                    assert any(b["tag"] == "details" and "Solution to" in b["title"] for b in shown), rendered
                else:
                    assert rendered["boxes"] and not shown, f"cell {index}: the empty solution-end box shows"
    assert all(kinds.values()), f"{MARKUP_CHAPTER} lacks one kind of MyST block: {kinds}"

    # %%cpp: C++ highlighting. A // comment is one comment token, not Python's // operator followed by
    # words; `namespace`, `const`, `static`..., which Python would leave plain names, are keywords.
    cpp = next(
        i
        for i, source in enumerate(sources)
        if source.startswith("%%cpp") and "\nnamespace " in source and "\n//" in source
    )
    editor = look_at(driver, cpp, EDITOR_JS, f"the %%cpp cell {cpp} to be highlighted", lambda e: e["tokens"])
    assert editor["language"] == "cpp", f"cell {cpp} is edited as {editor['language']!r}, not C++"
    comments = [t for t in editor["tokens"] if t["text"].startswith("//") and t["text"] == t["line"].strip()]
    assert comments, f"no // comment line of cell {cpp} is a single token: {editor['tokens'][:12]}"
    assert all(t["color"] == editor["comment"] and t["italic"] for t in comments), comments
    keywords = [t for t in editor["tokens"] if t["text"] in CPP_ONLY_KEYWORDS]
    assert keywords and all(t["color"] == editor["keyword"] and t["bold"] for t in keywords), keywords

    # %%py (the package's Python) and every other code cell stay Python: `def` is a keyword there.
    py = next(i for i, source in enumerate(sources) if source.startswith("%%py") and "\ndef " in source)
    editor = look_at(driver, py, EDITOR_JS, f"the %%py cell {py} to be highlighted", lambda e: e["tokens"])
    assert editor["language"] == "python", f"cell {py} is edited as {editor['language']!r}, not Python"
    assert any(t["text"] == "def" and t["color"] == editor["keyword"] for t in editor["tokens"]), editor
    shut_down_kernels(lab)


@pytest.mark.parametrize("name", CHAPTERS)
def test_chapter_runs_in_jupyterlab(browser, lab: Lab, name: str) -> None:  # type: ignore[no-untyped-def]
    driver = browser
    committed = (SOURCE / name).read_bytes()
    open_notebook(driver, lab, name)
    cells, seconds = run_all(driver, lab, name)
    print(f"{name}: Run All Cells took {seconds:.1f} s")
    ran = save(driver, lab, name)
    assert len(cells) == len(ran) == len(notebook_cells(SOURCE / name))
    unexpected = [
        f"cell {index}: {output['ename']}: {output['evalue'][:1000]}"
        for index, cell in enumerate(ran)
        if "raises-exception" not in cell.get("metadata", {}).get("tags", [])
        for output in cell.get("outputs", [])
        if output["output_type"] == "error"
    ]
    assert not unexpected, f"{name}: errors in cells not tagged raises-exception:\n" + "\n\n".join(unexpected)
    not_run = [
        i for i, cell in enumerate(ran) if cell["cell_type"] == "code" and cell["execution_count"] is None
    ]
    assert not not_run, f"{name}: cells Run All did not reach: {not_run}"
    if name == WIDGET_CHAPTER:
        check_dispatch_table_controls(driver)
    shut_down_kernels(lab)
    # JupyterLab saved only the copy: the chapter itself is as it was.
    assert (SOURCE / name).read_bytes() == committed


def shut_down_kernels(lab: Lab) -> None:
    """End every session's kernel, as closing the notebook with "shut down the kernel" would."""
    with urllib.request.urlopen(f"{lab.url}/api/sessions", timeout=10) as answer:
        sessions = json.load(answer)
    for session in sessions:
        request = urllib.request.Request(f"{lab.url}/api/sessions/{session['id']}", method="DELETE")
        urllib.request.urlopen(request, timeout=30).close()


def check_dispatch_table_controls(driver) -> None:  # type: ignore[no-untyped-def]
    """The live dispatch table re-reads the dispatcher when the reader changes its operators and keys."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    widgets = driver.find_elements(By.CSS_SELECTOR, ".jp-NotebookPanel:not(.lm-mod-hidden) .widget-vbox")
    boxes = [w for w in widgets if w.find_elements(By.CSS_SELECTOR, ".widget-text input")]
    assert boxes, "no live dispatch-table widget (ipywidgets controls) after running the chapter"
    box = boxes[0]
    driver.execute_script("arguments[0].scrollIntoView()", box)

    # Read in one script call: the widget replaces its table on every change.
    def read(selector: str, what: str) -> list[str]:
        script = f"return Array.from(arguments[0].querySelectorAll('{selector}')).map(e => e.{what})"
        return driver.execute_script(script, box)

    def operators() -> list[str]:
        return read(".ember-dispatch-table th.ember-op", "textContent")

    def keys() -> list[str]:
        return read(".ember-dispatch-table th.ember-key", "title")

    field = box.find_element(By.CSS_SELECTOR, ".widget-text input")
    field.click()
    field.send_keys(Keys.CONTROL, "a")
    field.send_keys("aten::add.Tensor, aten::mul.Tensor", Keys.ENTER)
    wait_for(
        lambda: operators() == ["aten::add.Tensor", "aten::mul.Tensor"],
        20,
        "the table to show the operators typed in",
        interval=0.2,
    )
    before = keys()
    assert len(before) >= 2, before
    box.find_element(By.CSS_SELECTOR, ".jupyter-widget-tag .jupyter-widget-tag-close").click()
    wait_for(lambda: keys() == before[1:], 20, f"the key {before[0]} to leave the table", interval=0.2)
