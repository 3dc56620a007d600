"""Headless Chromium for the browser tests (the rendered book, JupyterLab), started one way.

Debian's chromium and chromium-driver, driven by Selenium through an explicit driver path, so
Selenium Manager is never asked to download a browser or a driver. The flags keep Chromium from
reaching for the network (this machine has none) and from sharing a profile between runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")

QUIET_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)


def start_chromium(
    profile: Path, extra_flags: Iterable[str] = (), capabilities: dict | None = None
) -> object:
    """A Selenium driver of a new headless Chromium with an empty profile in `profile`."""
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.is_file()]
    if missing:
        pytest.fail(
            f"{' and '.join(missing)} not found: install them with "
            "`apt-get install -y --no-install-recommends chromium chromium-driver` (.ci/run does)",
            pytrace=False,
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*QUIET_FLAGS, *extra_flags, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    for name, value in (capabilities or {}).items():
        options.set_capability(name, value)
    return webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
