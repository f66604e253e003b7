"""Bodies of the link statistics answers (docs/guides/links.md): every figure covers the
requested range of UTC days."""

from __future__ import annotations

from datetime import date, datetime

import msgspec


class LinkStatsDay(msgspec.Struct, kw_only=True):
    date: date
    visits: int
    unique_visitors: int


class ReferrerVisits(msgspec.Struct, kw_only=True):
    referrer: str | None  # the host of the Referer header; null when none was sent
    visits: int


class BrowserVisits(msgspec.Struct, kw_only=True):
    browser: str
    visits: int


class CountryVisits(msgspec.Struct, kw_only=True):
    country: str | None  # ISO 3166-1 alpha-2; null when the address has none
    visits: int


class OsVisits(msgspec.Struct, kw_only=True):
    os: str | None  # android, ios, windows, macos, linux; null when not told
    visits: int


class DeviceVisits(msgspec.Struct, kw_only=True):
    device: str | None  # mobile, tablet, desktop; null when not told
    visits: int


class LinkStatsOut(msgspec.Struct, kw_only=True):
    code: str
    from_: date = msgspec.field(name="from")
    to: date
    total: int
    human: int
    bots: int
    unique_visitors: int
    days: list[LinkStatsDay]
    referrers: list[ReferrerVisits]
    browsers: list[BrowserVisits]
    countries: list[CountryVisits]
    os: list[OsVisits]
    devices: list[DeviceVisits]
    as_of: datetime


class LinkVisitsOut(msgspec.Struct, kw_only=True):
    code: str
    url: str
    title: str | None
    visits: int
    human: int
    bots: int


class TopLinksOut(msgspec.Struct, kw_only=True):
    from_: date = msgspec.field(name="from")
    to: date
    links: list[LinkVisitsOut]
