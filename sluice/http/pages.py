"""Small HTML pages for people who follow a link from a mail (verify, unsubscribe), and
the password form of a password-protected short link with the page that opens its target.

A mail link is opened by a person in a browser, and also fetched by mail
scanners and link previewers, which follow GET links but never submit forms:
so a GET only shows a page, and the change is a POST from the page's form.
Every value is escaped; the policy allows no script, no style from elsewhere,
no framing, and forms only to this origin; the page is never cached and sends
no Referer (its URL carries a token).
"""

from __future__ import annotations

import base64
import hashlib
import html
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qsl

from aiohttp import web

from sluice.errors import BadRequest

_STYLE = "body{font:16px/1.5 system-ui,sans-serif;max-width:36em;margin:3em auto;padding:0 1em}"
_STYLE_HASH = base64.b64encode(hashlib.sha256(_STYLE.encode()).digest()).decode()
_HEADERS = {
    "Content-Security-Policy": (
        f"default-src 'none'; style-src 'sha256-{_STYLE_HASH}'; form-action 'self'; "
        "base-uri 'none'; frame-ancestors 'none'"
    ),
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Robots-Tag": "noindex",
}


@dataclass(frozen=True)
class Form:
    """A POST form with hidden fields and one button; ``action`` None: this page's URL.
    ``password``: the label of a password field named ``password``, focused on load;
    ``error``: what was wrong with the last one sent, announced to screen readers."""

    button: str
    action: str | None = None
    fields: Mapping[str, str] = field(default_factory=dict)
    password: str | None = None
    error: str | None = None

    def render(self) -> str:
        """The form as HTML, every value escaped."""
        action = "" if self.action is None else f' action="{html.escape(self.action)}"'
        hidden = "".join(
            f'<input type="hidden" name="{html.escape(name)}" value="{html.escape(value)}">'
            for name, value in self.fields.items()
        )
        button = f"<button>{html.escape(self.button)}</button>"
        return f'<form method="post"{action}>{hidden}{self._password()}{button}</form>'

    def _password(self) -> str:
        if self.password is None:
            return ""
        error = described = ""
        if self.error is not None:
            alert = f"<strong>{html.escape(self.error)}</strong>"
            error = f'<p id="form-error" role="alert">{alert}</p>'
            described = ' aria-invalid="true" aria-describedby="form-error"'
        return (
            f'{error}<p><label for="password">{html.escape(self.password)}</label><br>'
            '<input id="password" name="password" type="password" required autofocus'
            f' autocomplete="current-password"{described}></p>'
        )


def page(
    title: str,
    *paragraphs: str,
    form: Form | None = None,
    onward: str | None = None,
    status: int = 200,
    headers: Mapping[str, str] | None = None,
) -> web.Response:
    """A page (200 unless ``status``): the title, the paragraphs (plain text, escaped),
    then the form, or a link to ``onward``, which the browser opens at once; ``headers``
    join the page's own."""
    body = "".join(f"<p>{html.escape(p)}</p>" for p in paragraphs)
    refresh, own = "", dict(_HEADERS)
    if onward is not None:
        # A declarative refresh, as a header and in the document: no script, and not a
        # redirect of the form's POST, which form-action 'self' would block.
        own["Refresh"] = f"0; url={onward}"
        refresh = f'<meta http-equiv="refresh" content="{html.escape(own["Refresh"])}">'
        body += f'<p><a href="{html.escape(onward)}">{html.escape(onward)}</a></p>'
    document = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"{refresh}<title>{html.escape(title)} - sluice</title><style>{_STYLE}</style></head>"
        f"<body><h1>{html.escape(title)}</h1>{body}{form.render() if form else ''}</body></html>"
    )
    return web.Response(
        status=status,
        text=document,
        content_type="text/html",
        charset="utf-8",
        headers={**own, **(headers or {})},
    )


def password_page(
    error: str | None = None, *, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    """The form of a password link (docs/guides/links.md): it POSTs ``password`` to the
    link's own URL (sluice/builtin/links/http/link_passwords.py). Names neither the link
    nor its target."""
    form = Form("Open the link", password="Password", error=error)
    return page(
        "Password required",
        "This short link is protected by a password. Enter it to follow the link.",
        form=form,
        status=status,
        headers=headers,
    )


def onward_page(url: str) -> web.Response:
    """What the right password of a password link answers: a page that opens ``url`` (the
    link's target) at once, and links to it for a browser that refreshes nothing by itself
    (sluice/builtin/links/http/link_passwords.py)."""
    return page(
        "Opening the link",
        "The password is right. If the page does not open by itself, follow this link:",
        onward=url,
    )


FORM = "application/x-www-form-urlencoded"


def is_form(request: web.Request) -> bool:
    """A body sent by an HTML form (or by a mail provider's RFC 8058 one-click POST)."""
    return request.content_type == FORM


async def read_form(request: web.Request) -> dict[str, str]:
    """The fields of a URL-encoded form in UTF-8 (the last of a repeated name); 400 for one
    that is not. Parsed here rather than by aiohttp, whose parser fails on an unknown
    charset with an error that is not the client's."""
    raw = await request.read()
    try:
        pairs = parse_qsl(raw.decode(), keep_blank_values=True, errors="strict", max_num_fields=20)
    except (UnicodeDecodeError, ValueError):
        raise BadRequest("the form body is not URL-encoded UTF-8 with at most 20 fields") from None
    return dict(pairs)
