"""A real headless browser (Debian's Chromium driven by Playwright) and the integration fixtures.

Without Chromium or Playwright the browser tests skip, saying why; with
SLUICE_REQUIRE_BROWSER=1 (CI) they fail instead, so a missing browser cannot
pass unnoticed.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

# The real store, Redis, relay and workers of the integration suite.
from tests.integration.engine_fixtures import (  # noqa: F401
    resources,
    running,
    start_relay,
    start_worker,
)
from tests.span_capture import spans  # noqa: F401 (traced in process)

if TYPE_CHECKING:
    from playwright.async_api import Page

CHROMIUM = Path(os.environ.get("SLUICE_CHROMIUM", "/usr/bin/chromium"))


def _missing() -> str | None:
    if not CHROMIUM.is_file():
        return f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)"
    if importlib.util.find_spec("playwright") is None:
        return "the playwright package is not installed (pip install -e '.[dev]')"
    return None


@pytest.fixture
async def page() -> AsyncIterator[Page]:
    """A fresh browser page; the browser is closed after the test."""
    missing = _missing()
    if missing is not None:
        if os.environ.get("SLUICE_REQUIRE_BROWSER") == "1":
            pytest.fail(f"SLUICE_REQUIRE_BROWSER=1, but {missing}")
        pytest.skip(missing)
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM))
        try:
            context = await browser.new_context(viewport={"width": 1360, "height": 900})
            yield await context.new_page()
        finally:
            await browser.close()
