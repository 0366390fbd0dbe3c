"""Browser helpers for the dashboard's tests: Debian's Chromium driven by Playwright."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is a test dependency")
CHROMIUM = os.environ.get("ORBIT_CHROMIUM") or shutil.which("chromium")
SHOTS = os.environ.get("ORBIT_SCREENSHOTS")


def launch(playwright):
    if not CHROMIUM:
        pytest.fail(
            "no Chromium: install Debian's chromium (scripts/test does) or set ORBIT_CHROMIUM"
        )
    return playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])


def signed_in(browser, url: str, token: str, **options):
    """A page of a new browser context signed in with ``token`` through the sign-in form."""
    context = browser.new_context(**options)
    page = context.new_page()
    page.goto(url + "/ui/")
    assert page.url.endswith("/ui/login")
    page.fill("input[name=token]", token)
    page.click("button[type=submit]")
    assert page.url.endswith("/ui/"), page.content()
    [cookie] = [c for c in context.cookies() if c["name"] == "orbit_session"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    return page


def shoot(page, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=True)
