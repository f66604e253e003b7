"""Short links (docs/reference/http-api.md, docs/guides/links.md): the code pool, links with rules,
passwords and limits, the redirect (answered by the core's fast path and wire path through the hook
this app declares), visits and their stats projection, QR codes, CSV imports and exports, orphan
visits, and webhooks of link events.

Declared on ``sluice.app`` like any app; it imports sluice's core and no other app.
"""

from __future__ import annotations

from sluice.builtin.links import declare, events, migrations  # noqa: F401  (declare)
from sluice.builtin.links.app import app

__all__ = ["app"]
