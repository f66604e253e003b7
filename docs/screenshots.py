"""The README's screenshots of this site: the home page, the tutorial, the HTTP API page.

Run by hand after ``make docs`` (it reads the built ``site/``):

    MERMAID_JS=/path/to/mermaid.min.js .venv/bin/python docs/screenshots.py

It serves ``site/`` on a free loopback port and drives Debian's Chromium
(``/usr/bin/chromium``) headless with Playwright, as the browser tests do, writing
``docs/assets/docs-{home,tutorial,api}.png``. The theme loads Mermaid from a CDN when a
page has a diagram; on a machine without that network, point ``MERMAID_JS`` at a local
copy (``npm pack mermaid@11`` has it in ``package/dist/``) and the request is answered
from it. Not part of the site (``exclude_docs`` in mkdocs.yml) and not run by the tests.
"""

from __future__ import annotations

import functools
import http.server
import os
import threading
from pathlib import Path

from playwright.sync_api import Route, sync_playwright

ROOT = Path(__file__).resolve().parents[1]
SITE, ASSETS = ROOT / "site", ROOT / "docs" / "assets"
PAGES = {"docs-home": "index.html", "docs-tutorial": "tutorial.html",
         "docs-api": "reference/http-api.html"}  # fmt: skip
PAGES.update(dict(page.split("=", 1) for page in os.environ.get("EXTRA_PAGES", "").split()))
# Headless as root on a closed network: no sandbox, no background requests that fail.
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base's name)
        pass


def _serve() -> http.server.ThreadingHTTPServer:
    handler = functools.partial(_Quiet, directory=str(SITE))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> None:
    if not (SITE / "index.html").exists():
        raise SystemExit("no site/: run `make docs` first")
    mermaid = os.environ.get("MERMAID_JS")
    server = _serve()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=FLAGS)
            page = browser.new_page(viewport={"width": 1280, "height": 860})
            if mermaid:

                def local(route: Route) -> None:
                    route.fulfill(path=mermaid, content_type="application/javascript")

                page.route("**/mermaid*.min.js", local)
            for name, path in PAGES.items():
                if not (SITE / path).exists():
                    print(f"skipped {name}: no {path} in site/")
                    continue
                page.goto(f"{base}/{path}", wait_until="networkidle")
                page.wait_for_timeout(500)  # Mermaid draws after the page's load event
                page.screenshot(path=ASSETS / f"{name}.png")
                print(f"wrote {ASSETS / name}.png")
            browser.close()
    finally:
        server.shutdown()


if __name__ == "__main__":
    main()
