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

from sluice.app import (
    UNAUTHORIZED,
    USER,
    Conflict,
    FieldError,
    Gone,
    Route,
    TooManyRequests,
    Unprocessable,
    User,
    html_page,
    json_response,
    ok,
    problem,
    read_json,
    ref,
    require_user,
    store,
    token_query,
    too_many,
    trace_id,
    user_by_id,
    utcnow,
)
from sluice.app.advanced import (
    FORM,
    HTML_PAGE,
    JSON,
    Form,
    is_form,
    page,
    read_form,
)
from sluice.builtin.accounts import verification as stored
from sluice.builtin.accounts.events import VerificationRequested
from sluice.builtin.accounts.http.keys import MAIL_LINK_KEY
from sluice.builtin.accounts.http.schemas import VerificationSent, VerifiedOut, VerifyBody
from sluice.builtin.accounts.mail.links import (
    NEW_LINK_COOLDOWN,
    NEW_LINKS_MAX,
    BadLink,
    parse_verify_token,
)

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
    user = await user_by_id(store(request), link.user_id)
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
    done = await stored.verify(store(request), user.id, user.email, utcnow(), trace_id(request))
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
    async with store(request).transaction() as tx:
        outcome, next_at = await stored.request_link(
            tx, user.id, now, NEW_LINK_COOLDOWN, NEW_LINKS_MAX
        )
        if outcome is stored.Requested.OK:
            await tx.append(
                VerificationRequested(
                    user_id=user.id, email=user.email, name=user.name, trace_id=trace_id(request)
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


_BAD_VERIFY_LINK = problem("no token, or a token sluice did not sign for this user's address")
_EXPIRED_LINK = problem(
    "the link is older than 7 days and the address is not verified yet; "
    "ask for a new one with POST /v1/me/verification"
)

ROUTES = (
    Route(
        "POST",
        "/v1/me/verification",
        request_link,
        {
            "operationId": "requestVerificationLink",
            "summary": "Mail a new verification link to the caller's address",
            "description": (
                "At most three per account, one an hour (the welcome mail counting as the first), "
                "to the address the user has when it is sent; the mail counts against the user's "
                "mail budget."
            ),
            "security": USER,
            "responses": {
                "202": ok(VerificationSent, "the mail is on its way"),
                "401": UNAUTHORIZED,
                "409": problem(
                    "the address is verified already, or the account had its three new links"
                ),
                "429": too_many("a link went out less than an hour ago"),
            },
        },
        structs=(VerificationSent,),
    ),
    Route(
        "GET",
        "/v1/verify",
        verify_page,
        {
            "operationId": "verifyPage",
            "summary": "The page of the welcome mail's link: a button that verifies the address",
            "description": (
                "Changes nothing (mail scanners follow links): the page's form POSTs the token to "
                "/v1/users/verify. For an address verified already, a page that says so."
            ),
            "parameters": [token_query("the token of the mailed link")],
            "responses": {
                "200": html_page("the page"),
                "410": _EXPIRED_LINK,
                "422": _BAD_VERIFY_LINK,
            },
        },
    ),
    Route(
        "POST",
        VERIFY_ROUTE,
        verify,
        {
            "operationId": "verifyAddress",
            "summary": "Verify the address a link was mailed to; using a link twice is harmless",
            "description": (
                "JSON `{token}` answers JSON; the form of GET /v1/verify answers a page. A link is "
                "valid 7 days; once the address is verified, any genuine link answers 200 with "
                "the first `verified_at`."
            ),
            "requestBody": {
                "required": True,
                "content": {
                    JSON: {"schema": ref(VerifyBody)},
                    FORM: {
                        "schema": {"type": "object", "properties": {"token": {"type": "string"}}}
                    },
                },
            },
            "responses": {
                "200": {
                    "description": "the address is verified",
                    "content": {JSON: {"schema": ref(VerifiedOut)}, **HTML_PAGE},
                },
                "400": problem(
                    "malformed JSON, a field of the wrong type or an unknown field; a "
                    "form that is not URL-encoded UTF-8"
                ),
                "410": _EXPIRED_LINK,
                "413": problem("the body is larger than 64 KiB"),
                "415": problem("the body is neither JSON nor a form"),
                "422": _BAD_VERIFY_LINK,
            },
        },
        structs=(VerifyBody, VerifiedOut),
    ),
)
