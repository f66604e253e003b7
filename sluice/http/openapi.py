"""The OpenAPI 3.1 document of every route; body schemas come from the Structs in schemas.py."""

from __future__ import annotations

from typing import Any

import msgspec
from aiohttp import web

from sluice.history.size import HistorySize
from sluice.http.admin import DEAD_LETTERS_DEFAULT, DEAD_LETTERS_MAX, Redriven
from sluice.http.bodies import JSON, PROBLEM_JSON, json_response
from sluice.http.keys import CONFIG
from sluice.http.schemas import (
    REMINDER_TEXT_MAX,
    VIEWER_MAX_LENGTH,
    ArticleViews,
    ExportStarted,
    Health,
    JobOut,
    LinkBody,
    LinkOut,
    LinkPage,
    LinkPatch,
    LinkStatsOut,
    Problem,
    Readiness,
    RegisterBody,
    ReminderBody,
    ReminderList,
    ReminderOut,
    TokenBody,
    TokenOut,
    TopArticles,
    TopSnapshot,
    UserOut,
    VerificationSent,
    VerifiedOut,
    VerifyBody,
    ViewBody,
    ViewCounted,
)
from sluice.http.tasks import RunStarted, TaskInfo
from sluice.scheduler.runs import RunRecord
from sluice.streams.dead_letters import DeadLetter
from sluice.streams.maintenance import Status

Doc = dict[str, Any]

_STRUCTS = (
    Health, Readiness, ViewBody, ViewCounted, ArticleViews, TopArticles, Problem,
    RegisterBody, UserOut, TokenBody, TokenOut, Status,
    LinkBody, LinkPatch, LinkOut, LinkPage,
    LinkStatsOut,
    ReminderBody, ReminderOut, ReminderList,
    TopSnapshot, TaskInfo, RunStarted, RunRecord,
    DeadLetter, Redriven, HistorySize,
    ExportStarted, JobOut,
    VerifyBody, VerifiedOut, VerificationSent,
)  # fmt: skip
_REF = "#/components/schemas/{name}"


def _ref(name: str) -> Doc:
    return {"$ref": _REF.format(name=name)}


def _ok(schema: str, description: str) -> Doc:
    return {"description": description, "content": {JSON: {"schema": _ref(schema)}}}


def _problem(description: str) -> Doc:
    return {"description": description, "content": {PROBLEM_JSON: {"schema": _ref("Problem")}}}


def _too_many(description: str) -> Doc:
    """A 429, which always says when to try again."""
    retry_after = {"description": "seconds to wait before trying again",
                   "schema": {"type": "integer", "minimum": 1}}  # fmt: skip
    return {**_problem(description), "headers": {"Retry-After": retry_after}}


# Password hashing is bounded per process (SLUICE_PASSWORD_HASH_CONCURRENCY).
_HASHING_UNAVAILABLE = _problem(
    "the database or Redis is unavailable, or this process is hashing as many passwords as"
    " it may at once (try again after Retry-After, or on another replica)"
)


_ARTICLE_ID = {
    "name": "article_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
}
_BAD_ARTICLE_ID = _problem(
    "the article id does not match ^[A-Za-z0-9_-]{1,64}$, or is 'top' (the leaderboard)"
)
_USER: list[Doc] = [{"user": []}]
_ADMIN: list[Doc] = [{"admin": []}]
_BAD_BODY = {
    "400": _problem("malformed JSON, or a field of the wrong type"),
    "413": _problem("the body is larger than 64 KiB"),
    "415": _problem("the body is not application/json"),
}
_UNAUTHORIZED = _problem("missing, unknown or expired bearer token")
_FORBIDDEN = _problem("a user token where the admin token is required")
_CODE = {"name": "code", "in": "path", "required": True, "schema": {"type": "string"}}
_TASK_NAME = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
_NO_LINK = _problem("no such link, or another user's (the same answer for both)")
_JOB_ID = {"name": "job_id", "in": "path", "required": True, "schema": {"type": "string"}}
_NO_JOB = _problem("no such job, or another user's (the same answer for both)")


def _required_header(description: str, schema: Doc | None = None) -> Doc:
    return {"description": description, "required": True,
            "schema": schema or {"type": "string"}}  # fmt: skip


_RESULT_HEADERS = {
    "Content-Disposition": _required_header('`attachment; filename="<code>-visits-<created>.csv"`'),
    "Content-Length": _required_header("bytes in this answer", {"type": "integer", "minimum": 0}),
    "ETag": _required_header("strong: the result never changes"),
    "Last-Modified": _required_header("the job's `finished_at`"),
    "Accept-Ranges": _required_header("byte ranges are served", {"const": "bytes"}),
}
_RESULT_CONDITIONS = [
    {"name": name, "in": "header", "required": False, "description": description,
     "schema": {"type": "string"}}
    for name, description in (
        ("Range", "one byte range: `bytes=first-`, `bytes=first-last` or `bytes=-suffix`"),
        ("If-Range", "an ETag or an HTTP date: the Range applies only to that very version"),
        ("If-Match", "ETags, or `*`: 412 unless one is the result's (strong comparison)"),
        ("If-None-Match", "ETags, or `*`: 304 when one is the result's (weak comparison)"),
        ("If-Modified-Since", "an HTTP date: 304 unless the result is newer"),
        ("If-Unmodified-Since", "an HTTP date: 412 when the result is newer"),
    )
]  # fmt: skip
_DEAD_ID = {"name": "id", "in": "path", "required": True,
            "description": (
                "the dead letter's id, as listed: its entry id (`ms-seq`) with one stream "
                "partition, `p<partition>-ms-seq` with several (a bare `ms-seq` is then "
                "looked up in every partition); unique within its group"),
            "schema": {"type": "string"}}  # fmt: skip
_DEAD_GROUP = {
    "name": "group", "in": "query", "required": False,
    "description": "the group holding the dead letter; without it, every group is searched",
    "schema": {"type": "string"},
}  # fmt: skip
_DEAD_ERRORS = {
    "401": _UNAUTHORIZED,
    "403": _FORBIDDEN,
    "404": _problem(
        "no dead letter with this id (in the group given), not a dead letter id at all, or "
        "an id naming a partition that does not exist"
    ),
    "409": _problem(
        "several groups (name one with ?group=), or several partitions of one (use the id "
        "with its partition), hold a dead letter with this entry id"
    ),
    "422": _problem("unknown group"),
    "503": _problem("Redis does not answer"),
}


def _body(schema: str) -> Doc:
    return {"required": True, "content": {JSON: {"schema": _ref(schema)}}}


_FORM = "application/x-www-form-urlencoded"
_HTML_PAGE = {"text/html": {"schema": {"type": "string"}}}


def _page(description: str) -> Doc:
    return {"description": description, "content": _HTML_PAGE}


def _token(description: str) -> Doc:
    return {"name": "token", "in": "query", "required": False, "description": description,
            "schema": {"type": "string"}}  # fmt: skip


_BAD_VERIFY_LINK = _problem("no token, or a token sluice did not sign for this user's address")
_EXPIRED_LINK = _problem("the link is older than 7 days and the address is not verified yet; "
                         "ask for a new one with POST /v1/me/verification")  # fmt: skip
_BAD_UNSUBSCRIBE_LINK = _problem("no token, or a token sluice did not sign")
_NO_REMINDER = _problem("the link names a reminder that does not exist")
_MAIL_LINK_PATHS: Doc = {
    "/v1/verify": {"get": {
        "operationId": "verifyPage",
        "summary": "The page of the welcome mail's link: a button that verifies the address",
        "description": (
            "Changes nothing (mail scanners follow links): the page's form POSTs the token to "
            "/v1/users/verify. For an address verified already, a page that says so."
        ),
        "parameters": [_token("the token of the mailed link")],
        "responses": {"200": _page("the page"), "410": _EXPIRED_LINK, "422": _BAD_VERIFY_LINK},
    }},
    "/v1/users/verify": {"post": {
        "operationId": "verifyAddress",
        "summary": "Verify the address a link was mailed to; using a link twice is harmless",
        "description": (
            "JSON `{token}` answers JSON; the form of GET /v1/verify answers a page. A link is "
            "valid 7 days; once the address is verified, any genuine link answers 200 with "
            "the first `verified_at`."
        ),
        "requestBody": {"required": True, "content": {
            JSON: {"schema": _ref("VerifyBody")},
            _FORM: {"schema": {"type": "object", "properties": {"token": {"type": "string"}}}},
        }},
        "responses": {
            "200": {"description": "the address is verified", "content": {
                JSON: {"schema": _ref("VerifiedOut")}, **_HTML_PAGE}},
            "400": _problem("malformed JSON, a field of the wrong type or an unknown field; a "
                            "form that is not URL-encoded UTF-8"),
            "410": _EXPIRED_LINK,
            "413": _problem("the body is larger than 64 KiB"),
            "415": _problem("the body is neither JSON nor a form"),
            "422": _BAD_VERIFY_LINK,
        },
    }},
    "/v1/me/verification": {"post": {
        "operationId": "requestVerificationLink",
        "summary": "Mail a new verification link to the caller's address",
        "description": (
            "At most three per account, one an hour (the welcome mail counting as the first), "
            "to the address the user has when it is sent; the mail counts against the user's "
            "mail budget."
        ),
        "security": _USER,
        "responses": {
            "202": _ok("VerificationSent", "the mail is on its way"),
            "401": _UNAUTHORIZED,
            "409": _problem("the address is verified already, or the account had its three "
                            "new links"),
            "429": _too_many("a link went out less than an hour ago"),
        },
    }},
    "/v1/unsubscribe": {
        "get": {
            "operationId": "unsubscribePage",
            "summary": "The page of a reminder mail's unsubscribe link: a button that pauses it",
            "description": "Changes nothing (mail scanners follow links); the button POSTs.",
            "parameters": [_token("the token of the mail's List-Unsubscribe URL")],
            "responses": {"200": _page("the page (also for a reminder paused or deleted)"),
                          "404": _NO_REMINDER, "422": _BAD_UNSUBSCRIBE_LINK},
        },
        "post": {
            "operationId": "unsubscribe",
            "summary": "One-click unsubscribe (RFC 8058): pause the reminder, no sign-in",
            "description": (
                "The URL of a reminder mail's `List-Unsubscribe` header, POSTed with "
                "`List-Unsubscribe=One-Click` by a mail provider or the page's button. Once "
                "answered, the reminder fires no more on any scheduler replica; a paused or "
                "deleted reminder answers the same."
            ),
            "parameters": [_token("the token of the mail's List-Unsubscribe URL")],
            "requestBody": {"required": False, "content": {_FORM: {"schema": {
                "type": "object",
                "properties": {"List-Unsubscribe": {"const": "One-Click"}},
            }}}},
            "responses": {"200": _page("the reminder is paused"), "404": _NO_REMINDER,
                          "422": _BAD_UNSUBSCRIBE_LINK},
        },
    },
}  # fmt: skip


_CODE_IN_PATH = {
    "name": "code", "in": "path", "required": True,
    "schema": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_-]{2,63}$"},
}  # fmt: skip
_REDIRECT_RESPONSES = {
    "302": {
        "description": "to the link's URL",
        "headers": {
            "Location": {"schema": {"type": "string", "format": "uri"}},
            "Cache-Control": {"schema": {"const": "private, no-store"}},
        },
    },
    "404": _problem("no link has this code"),
    "410": _problem("the link is disabled or expired"),
    "503": _problem("the link is not cached and the database is unavailable"),
}

_PATHS: Doc = {
    "/healthz": {"get": {
        "operationId": "healthz",
        "summary": "Liveness: 200 while the process runs",
        "responses": {"200": _ok("Health", "the process is up")},
    }},
    "/readyz": {"get": {
        "operationId": "readyz",
        "summary": "Readiness: the database and Redis answer",
        "responses": {
            "200": _ok("Readiness", "both dependencies answer"),
            "503": _problem("a dependency does not answer; `checks` says which"),
        },
    }},
    "/openapi.json": {"get": {
        "operationId": "openapi",
        "summary": "This document",
        "responses": {"200": {"description": "the OpenAPI document",
                              "content": {JSON: {"schema": {"type": "object"}}}}},
    }},
    "/admin": {"get": {
        "operationId": "adminDashboard",
        "summary": "The operations dashboard: one HTML page that asks for the admin token",
        "description": (
            "Static; it needs no token itself. In the browser it keeps the admin token for the "
            "tab and calls the admin routes with it, refreshing every 3 seconds."
        ),
        "responses": {"200": {"description": "the page",
                              "content": {"text/html": {"schema": {"type": "string"}}}}},
    }},
    "/metrics": {"get": {
        "operationId": "metrics",
        "summary": "Prometheus text: counters of every sluice process on the host, stream gauges",
        "security": _ADMIN,
        "responses": {
            "200": {"description": "Prometheus text exposition format",
                    "content": {"text/plain": {"schema": {"type": "string"}}}},
            "401": _UNAUTHORIZED,
            "403": _FORBIDDEN,
        },
    }},
    "/v1/articles/top": {"get": {
        "operationId": "topArticles",
        "summary": "The current period's most viewed articles, highest first",
        "parameters": [
            {"name": "period", "in": "query", "required": False,
             "schema": {"enum": ["day", "week", "month"], "default": "day"}},
            {"name": "limit", "in": "query", "required": False,
             "schema": {"type": "integer", "minimum": 1, "maximum": 100, "default": 10}},
        ],
        "responses": {
            "200": _ok("TopArticles", "the leaderboard; `start` is the period's first day"),
            "422": _problem("unknown period or a limit outside 1..100"),
        },
    }},
    "/v1/articles/{article_id}": {"get": {
        "operationId": "getArticle",
        "summary": "An article's total views (0 if never viewed)",
        "parameters": [_ARTICLE_ID],
        "responses": {"200": _ok("ArticleViews", "the total"), "422": _BAD_ARTICLE_ID},
    }},
    "/v1/articles/{article_id}/views": {"post": {
        "operationId": "postView",
        "summary": "Count a view, once per viewer within the dedupe window",
        "description": (
            "The viewer is the user of the bearer token if one is sent, else `viewer` from "
            "the body, else a keyed hash of client IP and User-Agent. The token and the body "
            "are optional."
        ),
        "security": [{}, *_USER],
        "parameters": [_ARTICLE_ID],
        "requestBody": {"required": False, "content": {JSON: {"schema": _ref("ViewBody")}}},
        "responses": {
            "202": _ok("ViewCounted", "`counted` is false for a viewer already counted"),
            "400": _problem("malformed JSON, or a field of the wrong type"),
            "401": _problem("a bearer token was sent, but it is malformed, unknown or expired"),
            "413": _problem("the body is larger than 64 KiB"),
            "415": _problem("the body is not application/json"),
            "422": _problem(
                f"invalid article id, or a viewer not 1 to {VIEWER_MAX_LENGTH} characters"
            ),
            "503": _problem("the database is unavailable; nothing was counted"),
        },
    }},
    "/v1/users": {"post": {
        "operationId": "register",
        "summary": "Register; the welcome mail is sent in the background, exactly once",
        "requestBody": _body("RegisterBody"),
        "responses": {
            "201": _ok("UserOut", "the new user"),
            **_BAD_BODY,
            "409": _problem("the email is taken (compared case-insensitively)"),
            "422": _problem("missing or invalid email, password not 8 to 128 characters"),
            "429": _too_many(
                "this client address's registrations are used up"
                " (SLUICE_REGISTRATIONS_PER_CLIENT per window)"
            ),
            "503": _HASHING_UNAVAILABLE,
        },
    }},
    "/v1/tokens": {"post": {
        "operationId": "login",
        "summary": "Exchange email and password for a bearer token",
        "requestBody": _body("TokenBody"),
        "responses": {
            "201": _ok("TokenOut", "the token and its expiry"),
            **_BAD_BODY,
            "401": _problem("unknown email or wrong password (the same answer for both)"),
            "422": _problem("email or password missing"),
            "429": _too_many(
                "5 failed logins for this email within 15 minutes, or this client address's"
                " logins used up (SLUICE_LOGINS_PER_CLIENT per window)"
            ),
            "503": _HASHING_UNAVAILABLE,
        },
    }},
    "/v1/tokens/current": {"delete": {
        "operationId": "logout",
        "summary": "Revoke the token this request carries",
        "security": _USER,
        "responses": {"204": {"description": "the token no longer works"},
                      "401": _UNAUTHORIZED},
    }},
    "/v1/me": {"get": {
        "operationId": "me",
        "summary": "The authenticated user, and whether the address is verified",
        "description": (
            "`verified` is true once a link from the welcome mail (or a new one) was followed; "
            "until then sluice mails the address nothing but verification links, so reminders "
            "do not mail."
        ),
        "security": _USER,
        "responses": {"200": _ok("UserOut", "the user"), "401": _UNAUTHORIZED},
    }},
    **_MAIL_LINK_PATHS,
    "/v1/admin/streams": {"get": {
        "operationId": "adminStreams",
        "summary": "Streams, groups, pending, lag, dead letters, relay backlog",
        "description": (
            "One item per stream of every partition: `partition` is its number (0 with one "
            "partition), `node` the Redis Cluster primary holding it (`host:port`; null on "
            "one Redis). A group's `dead_letters` on a stream are its dead letters in that "
            "stream's partition; its total is the sum over partitions. `delayed` counts the "
            "retries waiting for their backoff in every partition."
        ),
        "security": _ADMIN,
        "responses": {
            "200": _ok("Status", "the state of the streams"),
            "401": _UNAUTHORIZED,
            "403": _FORBIDDEN,
            "503": _problem("Redis does not answer"),
        },
    }},
    "/v1/admin/archive": {"get": {
        "operationId": "adminArchive",
        "summary": "The event history's size: hot events, archive segments, bytes, oldest event",
        "description": (
            "Read from the database alone (answers while Redis is down), from indexes and "
            "the segment index, never a scan. `hot_events` is the events table's seq span "
            "less the archived events inside it: exact on SQLite; on PostgreSQL a rolled-back "
            "append leaves a gap in the sequence that counts as an event. `archived_bytes` is "
            "the compressed size of the segments; `oldest_event_at` the older of the oldest "
            "segment's first event and the table's first event; `head_seq` the highest seq "
            "of the whole history."
        ),
        "security": _ADMIN,
        "responses": {
            "200": _ok("HistorySize", "the history's size now"),
            "401": _UNAUTHORIZED,
            "403": _FORBIDDEN,
            "503": _problem("the database does not answer"),
        },
    }},
    "/v1/admin/dead-letters": {"get": {
        "operationId": "listDeadLetters",
        "summary": "Dead letters of one group or of all, newest first",
        "description": (
            "Every partition's dead letters together. `id` is the entry id (`ms-seq`) with "
            "one stream partition, `p<partition>-ms-seq` with several; `partition` the "
            "partition; `stream` the aggregate stream the event came from; `deliveries` how "
            "often it was tried; `error` the last failure."
        ),
        "security": _ADMIN,
        "parameters": [
            {"name": "group", "in": "query", "required": False,
             "description": "one group's dead letters; absent or empty: every group's",
             "schema": {"type": "string"}},
            {"name": "limit", "in": "query", "required": False,
             "schema": {"type": "integer", "minimum": 1, "maximum": DEAD_LETTERS_MAX,
                        "default": DEAD_LETTERS_DEFAULT}},
        ],
        "responses": {
            "200": {"description": "the dead letters", "content": {JSON: {"schema": {
                "type": "array", "items": _ref("DeadLetter")}}}},
            "401": _UNAUTHORIZED,
            "403": _FORBIDDEN,
            "422": _problem(f"unknown group, or a limit outside 1..{DEAD_LETTERS_MAX}"),
            "503": _problem("Redis does not answer"),
        },
    }},
    "/v1/admin/dead-letters/{id}/redrive": {"post": {
        "operationId": "redriveDeadLetter",
        "summary": "Send a dead letter back to its group, with a fresh delivery count",
        "description": "The entry leaves the dead letters and joins the group's retry stream.",
        "security": _ADMIN,
        "parameters": [_DEAD_ID, _DEAD_GROUP],
        "responses": {"202": _ok("Redriven", "the entry is back in its group"), **_DEAD_ERRORS},
    }},
    "/v1/admin/dead-letters/{id}": {"delete": {
        "operationId": "dropDeadLetter",
        "summary": "Delete a dead letter for good",
        "security": _ADMIN,
        "parameters": [_DEAD_ID, _DEAD_GROUP],
        "responses": {"204": {"description": "dropped"}, **_DEAD_ERRORS},
    }},
    "/v1/links": {
        "post": {
            "operationId": "createLink",
            "summary": "Shorten a URL, under an alias or a generated 6-character code",
            "description": (
                "`url`: absolute http(s) with a host, at most 2048 characters, no user or "
                "password, not this service's own short domain. `alias`: "
                "^[A-Za-z0-9][A-Za-z0-9_-]{2,63}$, unique (case-sensitively), not a reserved "
                "word. `expires_at`: RFC 3339 with an offset, in the future. Unknown fields "
                "are refused (400)."
            ),
            "security": _USER,
            "requestBody": _body("LinkBody"),
            "responses": {
                "201": _ok("LinkOut", "the new link"),
                **_BAD_BODY,
                "401": _UNAUTHORIZED,
                "409": _problem("the alias is taken"),
                "422": _problem("invalid or missing url, invalid or reserved alias, "
                                "expiry not in the future"),
            },
        },
        "get": {
            "operationId": "listLinks",
            "summary": "The caller's links, newest first",
            "security": _USER,
            "parameters": [
                {"name": "limit", "in": "query", "required": False,
                 "schema": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20}},
                {"name": "cursor", "in": "query", "required": False,
                 "description": "`next_cursor` of the previous page", "schema": {"type": "string"}},
            ],
            "responses": {
                "200": _ok("LinkPage", "one page; `next_cursor` is null on the last one"),
                "401": _UNAUTHORIZED,
                "422": _problem("a limit outside 1..100, or a cursor this API did not return"),
            },
        },
    },
    "/v1/links/{code}": {
        "get": {
            "operationId": "getLink",
            "summary": "One of the caller's links",
            "security": _USER,
            "parameters": [_CODE],
            "responses": {"200": _ok("LinkOut", "the link"), "401": _UNAUTHORIZED,
                          "404": _NO_LINK},
        },
        "patch": {
            "operationId": "updateLink",
            "summary": "Change a link's url, expiry or disabled flag",
            "description": (
                "Absent fields keep their value; `expires_at: null` removes the expiry. "
                "The code never changes and links are never deleted."
            ),
            "security": _USER,
            "parameters": [_CODE],
            "requestBody": _body("LinkPatch"),
            "responses": {
                "200": _ok("LinkOut", "the link as changed"),
                **_BAD_BODY,
                "401": _UNAUTHORIZED,
                "404": _NO_LINK,
                "422": _problem("invalid url, or an expiry not in the future"),
            },
        },
    },
    "/v1/links/{code}/stats": {"get": {
        "operationId": "linkStats",
        "summary": "Visit statistics of one of the caller's links",
        "description": (
            "`total` counts GET redirects (never HEAD); `bots` those from a known crawler or "
            "link previewer; `human = total - bots`; `unique_visitors` counts distinct keyed "
            "hashes of IP + User-Agent. Totals, `referrers` (by host; null for no Referer) and "
            "`browsers` (the 100 busiest each) cover the link's whole life; `days` lists every "
            "UTC day from `from` to `to`, zeros included. Eventually consistent (seconds), "
            "exact once the workers drain; `as_of` is the time of the read."
        ),
        "security": _USER,
        "parameters": [
            {"name": "code", "in": "path", "required": True, "schema": {"type": "string"}},
            {"name": "from", "in": "query", "required": False,
             "description": "first UTC day, YYYY-MM-DD; default `to` minus 29 days",
             "schema": {"type": "string", "format": "date"}},
            {"name": "to", "in": "query", "required": False,
             "description": "last UTC day, YYYY-MM-DD; default today",
             "schema": {"type": "string", "format": "date"}},
        ],
        "responses": {
            "200": _ok("LinkStatsOut", "the statistics"),
            "401": _UNAUTHORIZED,
            "404": _problem("no such link, or another user's (the same answer for both)"),
            "422": _problem("a date not YYYY-MM-DD, `from` after `to`, or more than 366 days"),
        },
    }},
    "/v1/links/{code}/exports": {"post": {
        "operationId": "exportLink",
        "summary": "Start a CSV export of one of the caller's links' visits",
        "description": (
            "Answers at once; the `exports` workers build the CSV in the background from the "
            "event history, covering the visits committed before the request. While an export "
            "of the link is queued or running, the same job is answered again (no second "
            "scan). A user has at most SLUICE_EXPORTS_PER_USER (default 3) exports queued or "
            "running at once; beyond that the answer is 429 and nothing is queued. Poll "
            "`status_url`; the CSV has the columns visited_at, visitor, referrer_host, "
            "browser, is_bot."
        ),
        "security": _USER,
        "parameters": [_CODE],
        "responses": {
            "202": {**_ok("ExportStarted", "the job; `Location` is its status URL"),
                    "headers": {"Location": {"schema": {"type": "string", "format": "uri"}}}},
            "401": _UNAUTHORIZED,
            "404": _NO_LINK,
            "429": _too_many("SLUICE_EXPORTS_PER_USER exports of yours are queued or running; "
                             "ask again once one has finished"),
        },
    }},
    "/v1/jobs/{job_id}": {"get": {
        "operationId": "getJob",
        "summary": "A job's status and progress (0-100, never decreasing)",
        "description": (
            "`result_url` is set once the job succeeded, until the result is removed "
            "SLUICE_EXPORT_RETENTION seconds (default a day) after `finished_at`; "
            "`error` says why a job failed."
        ),
        "security": _USER,
        "parameters": [_JOB_ID],
        "responses": {
            "200": _ok("JobOut", "the job"),
            "401": _UNAUTHORIZED,
            "404": _NO_JOB,
        },
    }},
    "/v1/jobs/{job_id}/result": {"get": {
        "operationId": "getJobResult",
        "summary": "The CSV of a job that succeeded",
        "description": (
            "The result is kept in the database, so any replica serves it, read a chunk at a "
            "time. It never changes once the job succeeded: its `ETag` is strong and its "
            "`Last-Modified` is the job's `finished_at`. Conditions are evaluated as RFC 9110 "
            "section 13.2.2 orders them (If-Match, else If-Unmodified-Since: 412; "
            "If-None-Match, else If-Modified-Since: 304) before a `Range` is looked at. One "
            "byte range is served (`bytes=10-`, `bytes=10-99`, `bytes=-500`); an `If-Range` "
            "naming another version (a weak or other tag, a date other than Last-Modified) "
            "gets the whole CSV."
        ),
        "security": _USER,
        "parameters": [_JOB_ID, *_RESULT_CONDITIONS],
        "responses": {
            "200": {
                "description": "the CSV (RFC 4180, UTF-8, a header line), as an attachment",
                "headers": _RESULT_HEADERS,
                "content": {"text/csv": {"schema": {"type": "string"}}},
            },
            "206": {
                "description": "the part of the CSV a Range header asked for",
                "headers": {**_RESULT_HEADERS, "Content-Range": _required_header(
                    "`bytes first-last/size`")},
                "content": {"text/csv": {"schema": {"type": "string"}}},
            },
            "304": {
                "description": "If-None-Match or If-Modified-Since: the client's copy is current",
                "headers": {name: _RESULT_HEADERS[name] for name in ("ETag", "Last-Modified")},
            },
            "401": _UNAUTHORIZED,
            "404": _NO_JOB,
            "409": _problem("the job is queued, running or failed: no result"),
            "410": _problem("the result was removed after the retention period"),
            "412": _problem("If-Match names another version, or the result changed after "
                            "If-Unmodified-Since"),
            "416": {**_problem("a Range that starts past the end, is empty or backwards, or is "
                               "not one byte range"),
                    "headers": {"Content-Range": _required_header("`bytes */size`")}},
        },
    }},
    "/v1/reminders": {
        "post": {
            "operationId": "createReminder",
            "summary": "A cron reminder: one e-mail to you at each occurrence",
            "description": (
                "`cron`: six fields, seconds first (`sec min hour dom mon dow`), with ranges, "
                "steps, lists, three-letter month and day names, day of week 0-7 (0 and 7 are "
                "Sunday); Quartz tokens (`?`, `L`, `W`, `#`) and a seventh field are refused. "
                "`timezone`: an IANA zone the cron is read in. Occurrences must be at least "
                "SLUICE_REMINDER_MIN_INTERVAL seconds apart (default 60). `text`: 1 to "
                f"{REMINDER_TEXT_MAX} characters, not blank. At most 100 active reminders per "
                "user. `next_runs` are the next three occurrences, in UTC. Occurrences are "
                "mailed only once the address is verified, and within the user's mail budget "
                "(SLUICE_MAIL_USER_HOURLY, SLUICE_MAIL_USER_DAILY)."
            ),
            "security": _USER,
            "requestBody": _body("ReminderBody"),
            "responses": {
                "201": _ok("ReminderOut", "the new reminder"),
                **_BAD_BODY,
                "401": _UNAUTHORIZED,
                "422": _problem("bad cron (the reason named), unknown time zone, occurrences "
                                "closer than the minimum interval, blank or too long text, or "
                                "100 active reminders already"),
            },
        },
        "get": {
            "operationId": "listReminders",
            "summary": "The caller's reminders that are not deleted, newest first",
            "description": (
                "`status` is `paused` for a reminder paused by its mails' one-click "
                "unsubscribe: it does not fire, and its `next_runs` is empty."
            ),
            "security": _USER,
            "responses": {"200": _ok("ReminderList", "each with its next three occurrences"),
                          "401": _UNAUTHORIZED},
        },
    },
    "/v1/reminders/{id}": {"delete": {
        "operationId": "deleteReminder",
        "summary": "Delete a reminder: no occurrence fires after the deletion committed",
        "security": _USER,
        "parameters": [
            {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}},
        ],
        "responses": {
            "204": {"description": "deleted"},
            "401": _UNAUTHORIZED,
            "404": _problem("no such reminder, another user's, or deleted already"),
        },
    }},
    "/v1/articles/top/{date}": {"get": {
        "operationId": "topSnapshot",
        "summary": "The stored top 100 articles of a past day (snapshot-leaderboard task)",
        "parameters": [{"name": "date", "in": "path", "required": True,
                        "schema": {"type": "string", "format": "date"}}],
        "responses": {
            "200": _ok("TopSnapshot", "the snapshot, highest first"),
            "404": _problem("no snapshot was taken for that day"),
            "422": _problem("the date is not YYYY-MM-DD"),
        },
    }},
    "/v1/admin/tasks": {"get": {
        "operationId": "listTasks",
        "summary": "Every scheduled task with its cron, zone, next run and last run record",
        "security": _ADMIN,
        "responses": {
            "200": {"description": "the tasks", "content": {JSON: {"schema": {
                "type": "array", "items": _ref("TaskInfo")}}}},
            "401": _UNAUTHORIZED,
            "403": _FORBIDDEN,
        },
    }},
    "/v1/admin/tasks/{name}/runs": {
        "post": {
            "operationId": "runTask",
            "summary": "Run a task now, under the same lock as its scheduled runs",
            "description": "The run happens in the background; its record shows the outcome.",
            "security": _ADMIN,
            "parameters": [_TASK_NAME],
            "responses": {
                "202": _ok("RunStarted", "the run started"),
                "401": _UNAUTHORIZED,
                "403": _FORBIDDEN,
                "404": _problem("no task has this name"),
                "409": _problem("a run of the task is in progress on some replica"),
                "503": _problem("Redis does not answer; a run needs its lock"),
            },
        },
        "get": {
            "operationId": "taskRuns",
            "summary": "Run records of a task, newest first",
            "security": _ADMIN,
            "parameters": [
                _TASK_NAME,
                {"name": "limit", "in": "query", "required": False,
                 "schema": {"type": "integer", "minimum": 1, "maximum": 200, "default": 20}},
            ],
            "responses": {
                "200": {"description": "the run records", "content": {JSON: {"schema": {
                    "type": "array", "items": _ref("RunRecord")}}}},
                "401": _UNAUTHORIZED,
                "403": _FORBIDDEN,
                "404": _problem("no task has this name"),
                "422": _problem("a limit outside 1..200"),
            },
        },
    },
    "/{code}": {
        "get": {
            "operationId": "redirect",
            "summary": "Follow a short link: 302 to its URL, recording a visit",
            "description": "Every answer carries `Cache-Control: private, no-store` and"
            " `X-Trace-Id`, the trace id its visit is recorded with. A redirect that records"
            " a visit writes no request log line unless `SLUICE_REDIRECT_LOG=all`; 404, 410"
            " and 5xx answers are logged.",
            "parameters": [_CODE_IN_PATH],
            "responses": _REDIRECT_RESPONSES,
        },
        "head": {
            "operationId": "redirect_head",
            "summary": "The redirect's status and headers, without a body; records no visit",
            "parameters": [_CODE_IN_PATH],
            "responses": _REDIRECT_RESPONSES,
        },
    },
}  # fmt: skip


_UNAVAILABLE = _problem(
    "the database or Redis is unavailable and the route has no fallback (the database"
    " down or restarting, locked past its busy timeout, an I/O error, a full disk; Redis"
    " not answering)"
)
_RETRY_AFTER = {
    "Retry-After": {
        "description": "seconds to wait before trying again",
        "schema": {"type": "integer", "minimum": 1},
    }
}


def _unavailable(path: str, documented: Doc | None) -> Doc:
    """The 503 of an operation: its own words if it has some, and (readiness aside, which
    reports rather than refuses) ``Retry-After``."""
    answer = dict(documented or _UNAVAILABLE)
    if path != "/readyz":
        answer["headers"] = {**answer.get("headers", {}), **_RETRY_AFTER}
    return answer


def _with_unavailable(paths: Doc) -> Doc:
    """Every operation may answer 503 when a dependency fails (the request middleware);
    operations that say more about it keep their own description."""
    return {
        path: {
            method: {**op, "responses": {**op["responses"], "503": _unavailable(
                path, op["responses"].get("503"))}}
            for method, op in operations.items()
        }
        for path, operations in paths.items()
    }  # fmt: skip


_ADMIN_LIMITED = _too_many(
    "this client address failed admin authentication too often"
    " (SLUICE_ADMIN_FAILURES_PER_CLIENT per window); refused whatever the token until"
    " Retry-After"
)
_BODY_TOO_SLOW = _problem(
    "the body did not arrive within SLUICE_BODY_TIMEOUT_SECONDS; the connection closes"
    " after this answer"
)


def _limited(op: Doc) -> Doc:
    """An operation with the answers of the abuse limits (SPEC 15): 429 behind the admin
    token (failed admin authentications are limited per client address), 408 wherever
    a body is taken (the middleware reads it first, under SLUICE_BODY_TIMEOUT_SECONDS)."""
    extra = {"429": _ADMIN_LIMITED} if op.get("security") == _ADMIN else {}
    if "requestBody" in op or "413" in op["responses"]:
        extra["408"] = _BODY_TOO_SLOW
    return {**op, "responses": {**op["responses"], **extra}} if extra else op


def _with_limits(paths: Doc) -> Doc:
    return {
        path: {method: _limited(op) for method, op in operations.items()}
        for path, operations in paths.items()
    }


def build_document(base_url: str) -> Doc:
    """The document for a service reachable at ``base_url``."""
    _, schemas = msgspec.json.schema_components(_STRUCTS, ref_template=_REF)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "sluice",
            "version": "1.0.0",
            "description": "Event-sourced short links, view counts and scheduled work.",
        },
        "servers": [{"url": base_url}],
        "paths": _with_unavailable(_with_limits(_PATHS)),
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "user": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "a token from POST /v1/tokens",
                },
                "admin": {"type": "http", "scheme": "bearer", "description": "SLUICE_ADMIN_TOKEN"},
            },
        },
    }


async def openapi_view(request: web.Request) -> web.Response:
    return json_response(build_document(request.app[CONFIG].base_url))
