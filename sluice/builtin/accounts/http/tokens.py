"""What an owner needs after a scare: change the password (every other token revoked),
list the account's tokens and revoke one (docs/guides/security.md, "Who a stranger can
and cannot lock out")."""

from __future__ import annotations

import re

from aiohttp import web

from sluice.app import (
    BAD_BODY,
    UNAUTHORIZED,
    USER,
    FieldError,
    NotFound,
    Route,
    Unauthorized,
    Unprocessable,
    bearer_token,
    json_response,
    ok,
    problem,
    read_json,
    request_body,
    require_user,
    store,
    too_many,
    utcnow,
)
from sluice.app.advanced import CLIENT_LIMITS, PASSWORDS, by_account
from sluice.builtin.accounts.http.schemas import PasswordChange, TokenInfo, TokenList
from sluice.builtin.accounts.http.users import checked_password, password_errors
from sluice.builtin.accounts.stored import change_password, delete_user_token, user_tokens

TOKEN_ID = re.compile(r"[0-9a-f]{24}")


def _change(body: PasswordChange) -> tuple[str, str]:
    errors = []
    if not body.current_password:
        errors.append(FieldError("current_password", "is required"))
    new = body.new_password or ""
    errors += password_errors("new_password", new)
    if errors:
        raise Unprocessable("invalid password change", errors)
    assert body.current_password is not None
    return body.current_password, new


async def change_own_password(request: web.Request) -> web.Response:
    """The current password checked as a login's (a wrong one counted as a failed login of
    this email from this address), then the new one set and every other token revoked."""
    user = await require_user(request)
    current, new = _change(await read_json(request, PasswordChange))
    token = bearer_token(request)
    assert token is not None  # require_user passed
    hasher = request.app[PASSWORDS]
    address = request.app[CLIENT_LIMITS].address(request)
    with hasher.admit(by_account(user.id)) as claim:
        if await checked_password(request, claim, user.email, current, address) is None:
            raise Unauthorized("the current password is wrong")
    new_hash = await hasher.hash(new, claimant=by_account(user.id))
    await change_password(store(request), user.id, new_hash, keep=token)
    return web.Response(status=204)


async def list_tokens(request: web.Request) -> web.Response:
    user = await require_user(request)
    token = bearer_token(request)
    assert token is not None
    rows = await user_tokens(store(request), user.id, token, utcnow())
    items = [
        TokenInfo(id=r.id, created_at=r.created_at, expires_at=r.expires_at, current=r.current)
        for r in rows
    ]
    return json_response(TokenList(items=items))


async def revoke_token(request: web.Request) -> web.Response:
    user = await require_user(request)
    public_id = request.match_info["id"]
    if not TOKEN_ID.fullmatch(public_id) or not await delete_user_token(
        store(request), user.id, public_id, utcnow()
    ):
        raise NotFound("you have no token with this id")
    return web.Response(status=204)


_TOKEN_ID_IN_PATH = {
    "name": "id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": "^[0-9a-f]{24}$"},
}

ROUTES = (
    Route(
        "POST",
        "/v1/me/password",
        change_own_password,
        {
            "operationId": "changePassword",
            "summary": "Change your password; every other token of yours stops working",
            "description": (
                "`current_password` is checked as a login's password: a wrong one is 401 and "
                "counts as a failed login of your email from this address (429 once those "
                "are used up). `new_password` follows the rules of registration (8 to 128 "
                "characters). The token this request carries keeps working; every other token "
                "of yours is revoked at once, on every replica."
            ),
            "security": USER,
            "requestBody": request_body(PasswordChange),
            "responses": {
                "204": {"description": "changed; the other tokens are revoked"},
                **BAD_BODY,
                "401": problem(
                    "missing, unknown or expired bearer token, or a wrong current password"
                ),
                "422": problem("current_password missing, or new_password not 8 to 128 characters"),
                "429": too_many(
                    "too many failed logins for your email from this address, or "
                    "from many addresses new to your account, or this account has "
                    "SLUICE_PASSWORD_HASH_PER_CLAIMANT passwords being checked"
                ),
                "503": problem(
                    "the database or Redis is unavailable, or this process is "
                    "checking as many passwords as it takes (Retry-After)"
                ),
            },
        },
        structs=(PasswordChange,),
    ),
    Route(
        "GET",
        "/v1/tokens",
        list_tokens,
        {
            "operationId": "listTokens",
            "summary": "Your tokens that have not expired, newest first",
            "description": (
                "Each with an `id` to revoke it by, when it was made and when it expires, and "
                "`current` for the one this request carries; never the token itself. When a "
                "token was last used is not recorded."
            ),
            "security": USER,
            "responses": {"200": ok(TokenList, "your tokens"), "401": UNAUTHORIZED},
        },
        structs=(TokenList, TokenInfo),
    ),
    Route(
        "DELETE",
        "/v1/tokens/{id}",
        revoke_token,
        {
            "operationId": "revokeToken",
            "summary": "Revoke one of your tokens by its id",
            "description": "The token stops working at once, on every replica.",
            "security": USER,
            "parameters": [_TOKEN_ID_IN_PATH],
            "responses": {
                "204": {"description": "revoked"},
                "401": UNAUTHORIZED,
                "404": problem("you have no token with this id (another user's is not yours)"),
            },
        },
    ),
)
