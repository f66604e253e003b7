"""``POST /{code}``: the password form of a password link (docs/guides/links.md,
"Password links"), and its limit.

``GET /{code}`` of a link with a password answers a small form
(sluice/builtin/links/http/redirects.py,
sluice/http/pages.py), records nothing and counts nothing; the link's target is not on
the page. The form POSTs ``password`` to the same URL, and this handler checks it:

- the right one: a page that opens the target a GET of an open link would redirect to
  (its rules applied, its ``max_visits`` counted), and the visit it would record,
  through the same code;
- a wrong one: 401 and the form again, saying so;
- five wrong ones from one client for one link within fifteen minutes: 429, the form
  saying when to try again and ``Retry-After``, whatever is posted, the right password
  included, until the oldest of the five leaves the window.

Why a page and not a redirect: the form's Content-Security-Policy says ``form-action
'self'`` (the form may post the password to this service only), and Chromium and Safari
apply ``form-action`` to every redirect that answers a form as well, as CSP Level 3
writes it (Firefox has not, but may at any release): a 302 to the target, another
origin, is blocked and the person with the right password never gets there. So the
answer is a 200 page under the same policy that opens the target with a declarative
refresh (the ``Refresh`` header and ``<meta http-equiv="refresh">``, zero seconds; no
script), and links to it for a browser that refreshes nothing by itself. It is a GET of
the target from a page, not the form's navigation, so no ``form-action`` applies, in any
browser; the POST is answered once, so the visit is recorded once, and the refresh
replaces the page in the history, so Back returns to the form, never to a POST sent
again. The link's ``redirect_status`` does not apply here: a 301 or 308 after a POST
meant nothing to keep, and a 307 or 308 would have resent the password to the target.

The other way, ``form-action 'self'`` plus the target's origin (every rule's too) on the
form, was not taken: the form's header would name the target's site to anyone without
the password, a target changed between the form and the POST would be blocked, and so
would a target that redirects further (http to https, a tracker), since the directive
covers the whole chain.

The limit is the login limit's sliding window and script (``LoginLimiter``: a sorted
set in Redis per link and client, shared by every replica; an attempt counts as in
progress before the hash is checked, so guesses sent at once get five tries, not
more; in process only while Redis is down). The client is its address as the limits
of docs/guides/security.md see it (``client_address``: the peer, or what a
``SLUICE_TRUSTED_PROXIES`` proxy says; an IPv6 client is its /64), so one client's
guesses do not lock others out.

The hash is read from the database on each POST, never cached, and checked in a
thread of the bounded hasher (``PASSWORDS``), as a login's password, in the share of
the client's address (docs/guides/security.md, "The password hasher, shared fairly"):
a client with its share in hand is answered 429 with the form before anything else.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections.abc import AsyncIterator

from aiohttp import web

from sluice.app import (
    Route,
    TooManyRequests,
    UnsupportedMediaType,
    html_page,
    problem,
    redis,
    store,
    utcnow,
)
from sluice.app.advanced import (
    FORM,
    KEYS,
    MAX_FAILURES,
    NO_STORE,
    PASSWORDS,
    WINDOW_SECONDS,
    Claim,
    ClaimantBusy,
    LoginLimiter,
    by_address,
    client_address,
    is_form,
    onward_page,
    password_page,
    read_form,
)
from sluice.builtin.links.cache import Target
from sluice.builtin.links.http.keys import LINK_CACHE
from sluice.builtin.links.http.redirects import (
    CODE,
    TRUSTED_PROXIES,
    _problem,
    _target,
    _visit_left,
    destination,
    record_visit,
)
from sluice.builtin.links.keys import LinksKeys
from sluice.builtin.links.rules import PASSWORD_MAX
from sluice.builtin.links.stored import get_link

_WRONG = "Wrong password. Please try again."


class LinkPasswordLimiter(LoginLimiter):
    """Failed passwords per link and client: the login limit's windows and script, under
    keys of their own. ``subject``: the link's code and the client's address."""

    BUSY = "other passwords for this link are being checked; try again in a moment"
    USED_UP = "too many wrong passwords for this link; try again later"

    def _keys(self, email: str) -> list[str]:
        digest = hashlib.sha256(email.encode()).hexdigest()[:32]
        keys = LinksKeys(self.keys.prefix)
        return [keys.link_password_failures(digest), keys.link_password_attempts(digest)]


LINK_PASSWORD_LIMITER = web.AppKey("link_password_limiter", LinkPasswordLimiter)


async def password_limits(app: web.Application) -> AsyncIterator[None]:
    """cleanup_ctx (after the Redis client): the limiter of wrong link passwords."""
    app[LINK_PASSWORD_LIMITER] = LinkPasswordLimiter(redis(app), app[KEYS])
    yield


async def unlock(request: web.Request) -> web.StreamResponse:
    """The way on from a password link's form, for the right ``password`` form field."""
    trusted = request.app[TRUSTED_PROXIES]
    address = client_address(request, trusted)
    try:
        # The client's place in the hasher first: a client with its share in hand
        # already is refused before it costs anything else (no database, no Redis).
        claim = request.app[PASSWORDS].admit(by_address(address))
    except ClaimantBusy as exc:
        return password_page(_refusal(exc), status=429, headers=exc.headers)
    with claim:
        return await _unlock(request, request.match_info["code"], address, claim)


async def _unlock(
    request: web.Request, code: str, address: str, claim: Claim
) -> web.StreamResponse:
    now = utcnow()
    try:
        target = request.app[LINK_CACHE].cached(code)
    except KeyError:
        target = await _target(request, code) if CODE.fullmatch(code) else None
    if target is None or target.hidden(now):
        return _problem(404, f"no short link at {request.path}")
    if target.gone(now):
        return _problem(410, f"the short link {code} is disabled or expired")
    if not target.password:  # removed since the form was shown: a GET redirects now
        return _see_other(code)
    password = await _posted_password(request)
    subject = f"{code} {address}"
    limiter = request.app[LINK_PASSWORD_LIMITER]
    try:
        attempt = await limiter.attempt(subject)  # counted as in progress from now
    except TooManyRequests as exc:
        return password_page(_refusal(exc), status=429, headers=exc.headers)
    try:
        right = await _right(request, code, password, claim)
    except BaseException:  # no answer on the password (503, the client gone): not a failure
        await asyncio.shield(limiter.abandon(subject, attempt))
        raise
    if right is None:  # no password any more, or no link
        await limiter.abandon(subject, attempt)
        return _see_other(code)
    if not right:
        await limiter.failed(subject, attempt)
        return password_page(_WRONG, status=401)
    await limiter.succeeded(subject)
    return await _open(request, code, target)


async def _posted_password(request: web.Request) -> str:
    """The ``password`` field of the form ("" when absent): 415 for another body, 400
    for a form that is not URL-encoded UTF-8."""
    if not is_form(request):
        raise UnsupportedMediaType(f"send the form's fields as {FORM}")
    return (await read_form(request)).get("password", "")


async def _right(request: web.Request, code: str, password: str, claim: Claim) -> bool | None:
    """Whether ``password`` is the link's, by its hash as stored now; None when the
    link has none (any more). The hash is the client address's to claim: a visitor's."""
    link = await get_link(store(request), code)
    if link is None or link.password_hash is None:
        return None
    if not 0 < len(password) <= PASSWORD_MAX:  # no hash to spend on what cannot match
        return False
    return await claim.verify(password, link.password_hash)


async def _open(request: web.Request, code: str, target: Target) -> web.StreamResponse:
    """The page that opens where a GET of the link would redirect were it open (not a
    redirect: see the module's docstring), and its visit recorded alike."""
    now = utcnow()
    if target.max_visits is not None and not await _visit_left(request, code, target, True):
        return _problem(410, f"the short link {code} has served all its visits")
    record_visit(request, code, target, now)
    return onward_page(destination(request, target, request.app[TRUSTED_PROXIES]))


def _refusal(exc: TooManyRequests) -> str:
    if exc.detail == LinkPasswordLimiter.BUSY:
        return "Other passwords for this link are being checked. Try again in a moment."
    if isinstance(exc, ClaimantBusy):
        return "Other passwords from you are being checked. Try again in a moment."
    minutes = math.ceil(int(exc.headers["Retry-After"]) / 60)
    return f"Too many wrong passwords. Try again in {minutes} minute{'s' * (minutes > 1)}."


def _see_other(code: str) -> web.Response:
    return web.Response(status=303, headers={"Location": f"/{code}", "Cache-Control": NO_STORE})


_CODE_IN_PATH = {
    "name": "code",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_-]{2,63}$"},
}
_LOCATION = {"Location": {"schema": {"type": "string"}}}
_FORM_AGAIN = {"Cache-Control": {"schema": {"const": "no-store"}}}

ROUTES = (
    Route(
        "POST",
        "/{code}",
        unlock,
        {
            "operationId": "unlockLink",
            "summary": "Follow a password link: its password, from the link's form",
            "description": (
                "`GET /{code}` of a link with a `password` answers an HTML form (200, no visit "
                "recorded) that posts here. The right password answers 200 with an HTML page "
                "that opens the target a GET of the link would redirect to without one (its "
                "rules applied, its `max_visits` counted) at once, by a `Refresh: 0; url=...` "
                'header and the same `<meta http-equiv="refresh">`, and links to it; the '
                "visit is recorded. Not a 3xx: browsers apply the form's CSP `form-action "
                "'self'` to a redirect that answers it, and would block one to another site; "
                "so `redirect_status` does not apply. A wrong password is 401 with the form "
                "again. After "
                f"{MAX_FAILURES} wrong passwords for one link from one client (its address, "
                "or what a proxy in SLUICE_TRUSTED_PROXIES says; an IPv6 client is its /64) "
                f"within {WINDOW_SECONDS // 60} minutes, every POST from that client is 429 "
                "with the form and `Retry-After` until the oldest failure is "
                f"{WINDOW_SECONDS // 60} minutes old, the right password included. Counted "
                "across every API replica."
            ),
            "parameters": [_CODE_IN_PATH],
            "requestBody": {
                "required": True,
                "content": {
                    FORM: {
                        "schema": {
                            "type": "object",
                            "properties": {"password": {"type": "string"}},
                        }
                    }
                },
            },
            "responses": {
                "200": {
                    **html_page(
                        "the right password: a page that opens the link's target "
                        "at once, and links to it"
                    ),
                    "headers": {
                        "Refresh": {"schema": {"type": "string", "pattern": "^0; url=https?://"}}
                    },
                },
                "303": {
                    "description": "the link has no password (any more): to `/{code}`",
                    "headers": _LOCATION,
                },
                "400": problem("the form is not URL-encoded UTF-8 of at most 20 fields"),
                "401": {
                    **html_page("a wrong password: the form again, saying so"),
                    "headers": _FORM_AGAIN,
                },
                "404": problem("no link has this code, or its valid_since is still ahead"),
                "410": problem("the link is disabled or expired, or has served its max_visits"),
                "413": problem("the body is larger than 64 KiB"),
                "415": problem(f"the body is not {FORM}"),
                "429": {
                    **html_page(
                        f"{MAX_FAILURES} wrong passwords from this client within "
                        f"{WINDOW_SECONDS // 60} minutes, or this client has "
                        "SLUICE_PASSWORD_HASH_PER_CLAIMANT passwords being checked "
                        "already: the form, saying when to try again"
                    ),
                    "headers": {"Retry-After": {"schema": {"type": "integer", "minimum": 1}}},
                },
                "503": problem(
                    "the link is not cached and the database is unavailable, or this process "
                    "is checking as many passwords as it may at once (Retry-After)"
                ),
            },
        },
    ),
)
