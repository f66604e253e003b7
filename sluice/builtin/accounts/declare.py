"""What the accounts app declares on its ``App`` beyond its event types: its routes
(users, tokens, verification), the API context holding the key of the signed links in
mails; the ``mail`` handler group declares itself (``mail.group.mail_group``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from sluice.app import store
from sluice.builtin.accounts.app import app
from sluice.builtin.accounts.http import tokens, users, verification
from sluice.builtin.accounts.http.keys import MAIL_LINK_KEY
from sluice.builtin.accounts.mail.links import LinkKey
from sluice.builtin.tags import tagged

app.add_routes(tagged((*users.ROUTES, *tokens.ROUTES, *verification.ROUTES)))
app.tag("users", "Accounts, tokens, email verification, unsubscribing from mail")


@app.api_context
async def mail_link_key(web_app: web.Application) -> AsyncIterator[None]:
    """The key of the signed links in mails (verification, one-click unsubscribe)."""
    web_app[MAIL_LINK_KEY] = LinkKey(store(web_app))
    yield
