"""Users and tokens: register, log in, log out, who am I (password changes and the token
list: tokens.py)."""

from __future__ import annotations

import asyncio
import re
import secrets
from datetime import timedelta

from aiohttp import web

from sluice.app import (
    BAD_BODY,
    UNAUTHORIZED,
    USER,
    Conflict,
    FieldError,
    Route,
    Unauthorized,
    Unprocessable,
    User,
    bearer_token,
    json_response,
    ok,
    problem,
    read_json,
    request_body,
    require_user,
    store,
    too_many,
    trace_id,
    utcnow,
    uuid7,
)
from sluice.app.advanced import (
    CLIENT_LIMITS,
    DUMMY_HASH,
    LOGIN,
    LOGIN_LIMITER,
    PASSWORDS,
    REGISTER,
    Claim,
    by_address,
    credentials,
)
from sluice.builtin.accounts.events import UserRegistered
from sluice.builtin.accounts.http.schemas import RegisterBody, TokenBody, TokenOut, UserOut
from sluice.builtin.accounts.settings import AccountsSettings
from sluice.builtin.accounts.stored import EmailTaken, delete_token, insert_token, insert_user

# What the welcome mail can be written to (RFC 5322 dot-atom, ASCII): a local part of
# at most 64 characters, dots only between characters; a domain of DNS labels with an
# alphabetic or xn-- top level. Quoted local parts and raw non-ASCII are refused (an
# international domain is written in its xn-- form); whether the mailbox exists is the
# welcome mail's question, not this one's.
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_TLD = r"(?:[A-Za-z]{2,63}|xn--[A-Za-z0-9-]{1,59})"
EMAIL = re.compile(rf"(?=[^@]{{1,64}}@){_ATEXT}(?:\.{_ATEXT})*@(?:{_LABEL}\.)+{_TLD}")
EMAIL_MAX = 254
PASSWORD_MIN, PASSWORD_MAX = 8, 128
NAME_MAX = 200


def _out(user: User) -> UserOut:
    return UserOut(
        id=user.id,
        email=user.email,
        name=user.name,
        created_at=user.created_at,
        verified=user.verified_at is not None,
        verified_at=user.verified_at,
    )


def password_errors(field: str, password: str) -> list[FieldError]:
    """What is wrong with a new password: its length (the rules of registration)."""
    if PASSWORD_MIN <= len(password) <= PASSWORD_MAX:
        return []
    return [FieldError(field, f"must be {PASSWORD_MIN} to {PASSWORD_MAX} characters")]


def _registration(body: RegisterBody) -> tuple[str, str, str | None]:
    errors: list[FieldError] = []
    email = (body.email or "").strip()
    if not email:
        errors.append(FieldError("email", "is required"))
    elif len(email) > EMAIL_MAX or not EMAIL.fullmatch(email):
        errors.append(FieldError("email", "is not a valid email address"))
    password = body.password or ""
    errors += password_errors("password", password)
    name = body.name.strip() if body.name is not None else None
    if name is not None and not 1 <= len(name) <= NAME_MAX:
        errors.append(FieldError("name", f"must be 1 to {NAME_MAX} characters"))
    if errors:
        raise Unprocessable("invalid registration", errors)
    return email, password, name


async def register(request: web.Request) -> web.Response:
    """Create a user; the welcome mail follows through the ``mail`` group, never awaited here."""
    email, password, name = _registration(await read_json(request, RegisterBody))
    # The client's place in the hasher first: a burst beyond it is refused before it costs.
    with request.app[PASSWORDS].admit(_claimant(request)) as claim:
        await request.app[CLIENT_LIMITS].take(REGISTER, request)
        password_hash = await claim.hash(password)
    user = User(id=uuid7(), email=email, name=name, created_at=utcnow())
    event = UserRegistered(user_id=user.id, email=email, name=name, trace_id=trace_id(request))
    try:
        async with store(request).transaction() as tx:
            await insert_user(tx, user, password_hash)
            await tx.append(event)
    except EmailTaken:
        raise Conflict("a user with this email exists") from None
    return json_response(_out(user), 201)


def _claimant(request: web.Request) -> str:
    """Whose share of the password hasher a sign-up takes: its client address's (no
    account asks for it)."""
    return by_address(request.app[CLIENT_LIMITS].address(request))


async def checked_password(
    request: web.Request, claim: Claim, email: str, password: str, address: str
) -> str | None:
    """The id of the user whose email and password these are, else None, counted by the
    login windows of the email and the client (429 while they refuse it). An unknown email
    costs the same hash as a wrong password."""
    limiter = request.app[LOGIN_LIMITER]
    attempt = await limiter.attempt(email, address)  # counted as in progress from now
    try:
        found = await credentials(store(request), email)
        stored_hash = found[1] if found else DUMMY_HASH
        valid = await claim.verify(password[: PASSWORD_MAX * 4], stored_hash)
    except BaseException:  # no answer on the password (503, the client gone): not a failure
        await asyncio.shield(limiter.abandon(attempt))
        raise
    if found is None or not valid:
        await limiter.failed(attempt)
        return None
    await limiter.succeeded(attempt)
    return found[0]


async def create_token(request: web.Request) -> web.Response:
    """Log in. Unknown email and wrong password get the same answer, in the same time."""
    body = await read_json(request, TokenBody)
    if not body.email or not body.password:
        missing = [
            FieldError(f, "is required") for f in ("email", "password") if not getattr(body, f)
        ]
        raise Unprocessable("email and password are required", missing)
    address = request.app[CLIENT_LIMITS].address(request)
    with request.app[PASSWORDS].admit(by_address(address)) as claim:
        # Per address first: it spares the per-email sets (and a hash) a client's flood.
        await request.app[CLIENT_LIMITS].take(LOGIN, request)
        found = await checked_password(request, claim, body.email, body.password, address)
    if found is None:
        raise Unauthorized("invalid email or password")
    token = secrets.token_urlsafe(32)
    now = utcnow()
    expires = now + timedelta(seconds=AccountsSettings.of(request).token_ttl_seconds)
    await insert_token(store(request), token, found, now, expires)
    return json_response(TokenOut(token=token, expires_at=expires), 201)


async def delete_current_token(request: web.Request) -> web.Response:
    await require_user(request)
    token = bearer_token(request)
    assert token is not None  # require_user passed
    await delete_token(store(request), token)
    return web.Response(status=204)


async def me(request: web.Request) -> web.Response:
    return json_response(_out(await require_user(request)))


# Password hashing is bounded per process (SLUICE_PASSWORD_HASH_CONCURRENCY, and a queue
# of SLUICE_PASSWORD_HASH_QUEUE waiting at most SLUICE_PASSWORD_HASH_WAIT_SECONDS).
_HASHING_UNAVAILABLE = problem(
    "the database or Redis is unavailable, or this process has as many passwords to check"
    " running and queued as it takes, or this one waited too long for a slot (try again"
    " after Retry-After, or on another replica)"
)

ROUTES = (
    Route(
        "POST",
        "/v1/users",
        register,
        {
            "operationId": "register",
            "summary": "Register; the welcome mail is sent in the background, exactly once",
            "requestBody": request_body(RegisterBody),
            "responses": {
                "201": ok(UserOut, "the new user"),
                **BAD_BODY,
                "409": problem("the email is taken (compared case-insensitively)"),
                "422": problem("missing or invalid email, password not 8 to 128 characters"),
                "429": too_many(
                    "this client address's registrations are used up"
                    " (SLUICE_REGISTRATIONS_PER_CLIENT per window), or it has"
                    " SLUICE_PASSWORD_HASH_PER_CLAIMANT passwords being checked already"
                ),
                "503": _HASHING_UNAVAILABLE,
            },
        },
        structs=(RegisterBody, UserOut),
    ),
    Route(
        "POST",
        "/v1/tokens",
        create_token,
        {
            "operationId": "login",
            "summary": "Exchange email and password for a bearer token",
            "requestBody": request_body(TokenBody),
            "responses": {
                "201": ok(TokenOut, "the token and its expiry"),
                **BAD_BODY,
                "401": problem("unknown email or wrong password (the same answer for both)"),
                "422": problem("email or password missing"),
                "429": too_many(
                    "5 failed logins for this email from this client address within 15"
                    " minutes, or 20 for this email from addresses that never logged in to it"
                    " within an hour (docs/guides/security.md), or this client address's"
                    " logins used up (SLUICE_LOGINS_PER_CLIENT per window), or it has"
                    " SLUICE_PASSWORD_HASH_PER_CLAIMANT passwords being checked already"
                ),
                "503": _HASHING_UNAVAILABLE,
            },
        },
        structs=(TokenBody, TokenOut),
    ),
    Route(
        "DELETE",
        "/v1/tokens/current",
        delete_current_token,
        {
            "operationId": "logout",
            "summary": "Revoke the token this request carries",
            "security": USER,
            "responses": {"204": {"description": "the token no longer works"}, "401": UNAUTHORIZED},
        },
    ),
    Route(
        "GET",
        "/v1/me",
        me,
        {
            "operationId": "me",
            "summary": "The authenticated user, and whether the address is verified",
            "description": (
                "`verified` is true once a link from the welcome mail (or a new one) was followed; "
                "until then sluice mails the address nothing but verification links, so reminders "
                "do not mail."
            ),
            "security": USER,
            "responses": {"200": ok(UserOut, "the user"), "401": UNAUTHORIZED},
        },
        structs=(UserOut,),
    ),
)
