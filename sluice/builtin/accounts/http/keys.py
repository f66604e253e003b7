"""The accounts app's aiohttp state, behind typed keys."""

from __future__ import annotations

from aiohttp import web

from sluice.builtin.accounts.mail.links import LinkKey

# The key of the signed links in mails (verification, one-click unsubscribe).
MAIL_LINK_KEY = web.AppKey("mail_link_key", LinkKey)
