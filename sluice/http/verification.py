"""Verifying a user's address: the link of the welcome mail, and asking for a new one.

``GET /v1/verify?token=`` (the mailed link) only shows a page whose button
POSTs the token to ``POST /v1/users/verify``: mail scanners follow links, and
a scanner must not verify an address nobody looked at. API clients POST
``{token}`` as JSON and get JSON; the page's form gets a page. Using a link
twice answers as the first time did; the expiry (7 days) matters only while
the address is not verified yet.
"""

from __future__ import annotations

import math

from aiohttp import web

from sluice.errors import Conflict, FieldError, Gone, TooManyRequests, Unprocessable
from sluice.events import VerificationRequested, utcnow
from sluice.http.auth import require_user
from sluice.http.bodies import json_response, read_json
from sluice.http.keys import MAIL_LINK_KEY, STORE, TRACE_ID
from sluice.http.pages import Form, is_form, page, read_form
from sluice.http.schemas import VerificationSent, VerifiedOut, VerifyBody
from sluice.mail.links import NEW_LINK_COOLDOWN, NEW_LINKS_MAX, BadLink, parse_verify_token
from sluice.store import verification as stored
from sluice.store.users import User, user_by_id

VERIFY_ROUTE = "/v1/users/verify"


def _not_ours(message: str = "this is not a verification link sluice sent") -> Unprocessable:
    return Unprocessable("invalid verification link", [FieldError("token", message)])


async def _genuine(request: web.Request, token: object) -> User:
    """The user of a link sluice made for the address the user has; 422 otherwise, 410 when
    it expired and the address is not verified yet."""
    if not isinstance(token, str) or not token:
        raise _not_ours("required: the token of the link in the welcome mail")
    try:
        link = parse_verify_token(token)
    except BadLink:
        raise _not_ours() from None
    user = await user_by_id(request.app[STORE], link.user_id)
    key = await request.app[MAIL_LINK_KEY].get()
    if user is None or not link.signed_for(key, user.email):
        raise _not_ours()
    if user.verified_at is None and link.expired(utcnow()):
        raise Gone(
            f"this verification link expired at {link.expires_at:%Y-%m-%dT%H:%M:%SZ}; sign in"
            " and ask for a new one (POST /v1/me/verification)"
        )
    return user


def _verified_page(email: str) -> web.Response:
    return page("Address verified", f"{email} is verified: reminders are mailed to it now.")


async def verify_page(request: web.Request) -> web.Response:
    """The page of a mailed link: a button that verifies (GET changes nothing)."""
    token = request.query.get("token")
    user = await _genuine(request, token)
    if user.verified_at is not None:
        return _verified_page(user.email)
    assert token is not None  # _genuine passed
    return page(
        "Confirm your address",
        f"Confirm that {user.email} is your address. Until it is confirmed, sluice mails it "
        "no reminders.",
        form=Form("Confirm my address", action=VERIFY_ROUTE, fields={"token": token}),
    )


async def verify(request: web.Request) -> web.Response:
    """Verify the address a link names; 200 also for a link used again."""
    from_form = is_form(request)
    if from_form:
        token: object = (await read_form(request)).get("token")
    else:
        token = (await read_json(request, VerifyBody)).token
    user = await _genuine(request, token)
    done = await stored.verify(request.app[STORE], user.id, user.email, utcnow(), request[TRACE_ID])
    if done.verified_at is None:  # the address changed since the check
        raise _not_ours()
    if from_form:
        return _verified_page(done.email)
    return json_response(
        VerifiedOut(user_id=user.id, email=done.email, verified_at=done.verified_at)
    )


async def request_link(request: web.Request) -> web.Response:
    """A new verification link to the caller's address; one an hour, three in all."""
    user = await require_user(request)
    now = utcnow()
    async with request.app[STORE].transaction() as tx:
        outcome, next_at = await stored.request_link(
            tx, user.id, now, NEW_LINK_COOLDOWN, NEW_LINKS_MAX
        )
        if outcome is stored.Requested.OK:
            await tx.append(
                VerificationRequested(
                    user_id=user.id, email=user.email, name=user.name, trace_id=request[TRACE_ID]
                )
            )
    if outcome is stored.Requested.VERIFIED:
        raise Conflict("your address is verified already")
    if outcome is stored.Requested.USED_UP:
        raise Conflict(
            f"this account had its {NEW_LINKS_MAX} new verification links; ask the operator"
        )
    if outcome is stored.Requested.TOO_SOON:
        assert next_at is not None
        wait = math.ceil((next_at - now).total_seconds())
        raise TooManyRequests(
            "a verification link went out less than an hour ago (the welcome mail has one)",
            retry_after=wait,
        )
    return json_response(VerificationSent(email=user.email), 202)
