"""The ``links`` app object; the modules beside it declare its parts on it."""

from __future__ import annotations

from sluice.app import App
from sluice.builtin.links.keys import LinksKeys
from sluice.builtin.links.settings import LinksSettings

app = App(
    "links",
    keys=LinksKeys,
    settings=LinksSettings,
    description="short links: a code pool, rules, redirects through the core's fast path,"
    " stats, QR codes, imports, exports, orphan visits and webhooks of link events",
)
