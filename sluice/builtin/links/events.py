"""The links app's event types: what it commits to the history (and the outbox) together
with its state, published on the streams of its aggregates (links, visits, exports)."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from sluice.app import Event
from sluice.builtin.links.app import app
from sluice.builtin.links.rule_shapes import Rule

app.aggregate("links", key="code")
app.aggregate("visits", key="code")
app.aggregate("exports", key="job_id")


@app.event
class LinkCreated(Event, frozen=True, kw_only=True, tag=True):
    """A short link was made (``POST /v1/links``, or a row of a CSV import): its whole first state.
    The fields after ``disabled`` came with docs/guides/links.md (issue 18); their defaults are what
    events written before them mean."""

    aggregate: ClassVar[str] = "links"
    code: str
    owner_id: str
    url: str
    expires_at: datetime | None = None
    disabled: bool = False
    max_visits: int | None = None
    valid_since: datetime | None = None
    redirect_status: int = 302
    tags: tuple[str, ...] = ()
    title: str | None = None
    rules: tuple[Rule, ...] = ()
    has_password: bool = False  # whether it has a password (never the password or its hash)


@app.event
class LinkUpdated(Event, frozen=True, kw_only=True, tag=True):
    """The link's whole new state, so a cache can apply it without a read (the fields as
    in ``LinkCreated``)."""

    aggregate: ClassVar[str] = "links"
    code: str
    owner_id: str
    url: str
    expires_at: datetime | None = None
    disabled: bool = False
    max_visits: int | None = None
    valid_since: datetime | None = None
    redirect_status: int = 302
    tags: tuple[str, ...] = ()
    title: str | None = None
    rules: tuple[Rule, ...] = ()
    has_password: bool = False  # whether it has a password (never the password or its hash)


@app.event
class LinkVisited(Event, frozen=True, kw_only=True, tag=True):
    """A redirect of ``code`` was followed (``GET /{code}``): what the link's stats count.
    ``country``, ``os`` and ``device`` are None when they cannot be told, and in visits
    recorded by a release before they were (docs/guides/upgrades.md)."""

    aggregate: ClassVar[str] = "visits"
    code: str
    visitor: str  # keyed hash of IP + User-Agent; the raw IP is never stored
    referrer_host: str | None = None
    browser: str = "Other"
    is_bot: bool = False
    country: str | None = None  # ISO 3166-1 alpha-2 of the client address
    os: str | None = None  # android, ios, windows, macos or linux
    device: str | None = None  # mobile, tablet or desktop


@app.event
class ExportRequested(Event, frozen=True, kw_only=True, tag=True):
    """A user asked for the CSV of a link's visits (``POST /v1/links/{code}/exports``); the
    exports group runs job ``job_id``."""

    aggregate: ClassVar[str] = "exports"
    job_id: str
    owner_id: str
    code: str


@app.event
class ImportRequested(Event, frozen=True, kw_only=True, tag=True):
    """A CSV of links uploaded (``sluice.builtin.links.imports``); on the jobs stream, with
    the exports."""

    aggregate: ClassVar[str] = "exports"
    job_id: str
    owner_id: str
