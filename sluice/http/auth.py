"""Who is calling: bearer tokens of users, and the admin token.

Views call ``require_user``, ``optional_user`` or ``require_admin``; the
answers follow the spec: 401 for a missing, unknown or expired token, 403 for
a valid user token where the admin is required.
"""

from __future__ import annotations

from typing import NoReturn

from aiohttp import web

from sluice.config.validation import printable_ascii
from sluice.errors import Forbidden, Unauthorized
from sluice.events import utcnow
from sluice.http.app_keys import ADMIN_TOKEN, CLIENT_LIMITS, STORE, USER
from sluice.http.client_limit import ADMIN
from sluice.store.users import User, user_for_token


def bearer_token(request: web.Request) -> str | None:
    """The bearer token sent, None without an Authorization header; 401 if it is malformed."""
    header = request.headers.get("Authorization")
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    # Tokens are printable ASCII; anything else (bytes that were not UTF-8 arrive as
    # surrogates) cannot be one and would not even hash.
    if scheme.lower() != "bearer" or not token or len(token) > 512 or not printable_ascii(token):
        raise Unauthorized("the Authorization header must be 'Bearer <token>'")
    return token


async def optional_user(request: web.Request) -> User | None:
    """The authenticated user, or None when no token was sent; 401 for a bad token."""
    token = bearer_token(request)
    if token is None:
        return None
    if USER in request:
        return request[USER]
    user = await user_for_token(request.app[STORE], token, utcnow())
    if user is None:
        raise Unauthorized("the token is unknown or expired")
    request[USER] = user
    return user


async def require_user(request: web.Request) -> User:
    """The user whose bearer token the request carries; ``Unauthorized`` (401) without
    one, or with an unknown or expired one."""
    user = await optional_user(request)
    if user is None:
        raise Unauthorized("a bearer token is required")
    return user


async def require_user_or_admin(request: web.Request) -> User | None:
    """The user of a user token, None for the admin token; 401 for anything else.

    Failures count against the client's admin attempts as ``require_admin``'s do:
    this route takes the admin token too, so it must not be a way around that limit.
    """
    token = bearer_token(request)
    if token is None:
        raise Unauthorized("a bearer token is required")
    if await request.app[ADMIN_TOKEN].matches(token):
        return None
    user = await user_for_token(request.app[STORE], token, utcnow())
    if user is not None:
        return user
    await _failed(request)


async def require_admin(request: web.Request) -> None:
    """Pass with the admin token; 403 for a user's token, 401 for anything else.

    The right token always passes, and so does a user's valid token here and on every
    route: both are long random strings that no one guesses, and checking them costs a
    constant-time compare and an indexed lookup, so an address that others used up (every
    client behind a proxy not in ``SLUICE_TRUSTED_PROXIES`` shares one) cannot lock the
    operator or a user out. A token that is neither counts as a failed admin
    authentication of the client's address; once the address has none left, such tokens
    get 429 instead of 401 (docs/guides/security.md).
    """
    token = bearer_token(request)
    if token is None:
        raise Unauthorized("the admin token is required")
    if await request.app[ADMIN_TOKEN].matches(token):
        return
    if await user_for_token(request.app[STORE], token, utcnow()) is not None:
        raise Forbidden("this route needs the admin token; a user token is not enough")
    await _failed(request)


async def _failed(request: web.Request) -> NoReturn:
    """A token that is neither the admin's nor a user's: 401, counted against the client's
    address; 429 once the address has no failed admin authentications left."""
    await request.app[CLIENT_LIMITS].take(ADMIN, request)
    raise Unauthorized("the token is unknown or expired")
