"""Debian's chromium, headless, driven by Playwright (never ``playwright install``: the browser
is the system's, installed by ``scripts/install``). Shared by tests/dashboard and
bench/dashboard.py."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import BrowserContext, sync_playwright

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@contextmanager
def chromium() -> Iterator[BrowserContext]:
    """A browser with a fresh profile directory, closed and removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="dashboard-chromium-") as profile, \
            sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            Path(profile), executable_path=CHROMIUM, headless=True, args=ARGS,
            viewport={"width": 1400, "height": 900},
            # the page's Content-Security-Policy forbids eval, which Playwright's
            # wait_for_function needs; bypassing it also proves the escaping tests pass on the
            # rendering alone, not because the policy blocked an injected script
            bypass_csp=True)
        try:
            yield context
        finally:
            context.close()
