"""What a link may hold: target URL, alias and expiry rules. Each check raises ``Invalid``."""

from __future__ import annotations

import contextlib
import ipaddress
import re
import socket
import unicodedata
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Annotated
from urllib.parse import SplitResult, quote, urlsplit

import msgspec

from sluice.app import SluiceError

URL_MAX = 2048
ALIAS = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{2,63}")
# Compared case-insensitively. Some cannot match ALIAS anyway ("v1", "robots.txt");
# they are listed so the rule reads as the spec does.
RESERVED = frozenset(
    {
        "api",
        "admin",
        "v1",
        "v2",
        "healthz",
        "readyz",
        "health",
        "metrics",
        "openapi.json",
        "static",
        "assets",
        "login",
        "logout",
        "favicon.ico",
        "robots.txt",
        "docs",
        "status",
        "stats",  # GET /v1/links/stats lists the caller's busiest links, not a link so named
    }
)
_NO_ROUTES: Mapping[str, str] = {}
_DEFAULT_PORTS = {"http": 80, "https": 443}
_LOOPBACK = "localhost"  # what every loopback host compares as
_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_HOST = re.compile(rf"(?:{_LABEL}\.)*{_LABEL}")
_HEX = re.compile(r"0x[0-9a-f]*")
# Kept as they are when an IRI is turned into a URI: RFC 3986 delimiters and '%'.
_URI_SAFE = "!#$%&'()*+,/:;=?@[]~"
_AwareDatetime = Annotated[datetime, msgspec.Meta(tz=True)]
_HIDDEN = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp"})
_JOINERS = frozenset({"\u200c", "\u200d"})  # zero-width non-joiner and joiner


class Invalid(SluiceError):
    """A value breaks a link rule; the message says which, for the API's field errors."""


def _split(url: str) -> SplitResult:
    # Controls (C0, DEL, C1), spaces of every kind, line and paragraph separators, and
    # invisible formatting characters (bidi overrides that make a URL read otherwise;
    # the zero-width joiners that Persian, Indic scripts and emoji need are kept).
    if any(
        ord(c) <= 0x20
        or c == "\x7f"
        or (not c.isascii() and unicodedata.category(c) in _HIDDEN and c not in _JOINERS)
        for c in url
    ):
        raise Invalid("must not contain spaces, control or invisible formatting characters")
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError on a bad port
    except ValueError as exc:
        raise Invalid(f"is not a valid URL ({exc})") from None
    if port == 0:
        raise Invalid("is not a valid URL (port 0)")
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        shown = f"'{scheme}:' URLs are" if scheme else "a relative URL is"
        raise Invalid(f"must be an absolute http or https URL; {shown} not allowed")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise Invalid("must not contain a user name or password")
    if not parts.hostname:
        raise Invalid("must have a host")
    return parts


def _ascii_host(host: str) -> str:
    if ":" in host:  # an IPv6 literal, checked by urlsplit
        return host
    try:
        ascii_host = host.encode("idna").decode("ascii") if not host.isascii() else host
    except UnicodeError:
        raise Invalid("has a host that is not a valid domain name") from None
    if len(ascii_host) > 253 or not _HOST.fullmatch(ascii_host.removesuffix(".")):
        raise Invalid("has a host that is not a valid domain name")
    return ascii_host


def _as_uri(parts: SplitResult, host: str) -> str:
    """An IRI as the ASCII URI a Location header can carry (IDNA host, UTF-8 percent-encoding)."""
    if ":" in host:
        host = f"[{host}]"
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    path, query, fragment = (
        quote(part, safe=_URI_SAFE) for part in (parts.path, parts.query, parts.fragment)
    )
    return parts._replace(netloc=netloc, path=path, query=query, fragment=fragment).geturl()


def _canonical_host(host: str) -> str:
    """The host as a browser reads it, to compare origins: IPv4 in any of its legacy
    spellings (``127.1``, ``0x7f.0.0.1``, ``2130706433``) as dotted decimal, an
    IPv4-mapped IPv6 address as that IPv4, other IPv6 compressed, names lowercased.
    A host whose last label is a number can only be an IPv4 address (WHATWG URL).
    Every loopback host is one: ``localhost``, ``*.localhost`` (RFC 6761, which
    browsers resolve to loopback without asking DNS), ``127.0.0.0/8``, ``::1``, and
    the unspecified ``0.0.0.0`` and ``::``, which reach this host too."""
    if ":" in host:
        try:
            address = ipaddress.IPv6Address(host)
        except ValueError:
            raise Invalid("has a host that is not a valid IPv6 address") from None
        canonical = address.ipv4_mapped or address
        return _LOOPBACK if _local(canonical) else str(canonical)
    host = host.lower().removesuffix(".")
    last = host.rpartition(".")[2]
    if last.isdigit() or _HEX.fullmatch(last):
        try:
            ipv4 = socket.inet_ntoa(socket.inet_aton(host))
        except OSError:
            raise Invalid("has a host that is not a valid IPv4 address") from None
        return _LOOPBACK if _local(ipaddress.IPv4Address(ipv4)) else ipv4
    if host == _LOOPBACK or host.endswith("." + _LOOPBACK):
        return _LOOPBACK
    return host


def _local(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Loopback, or the unspecified address (0.0.0.0, ::), which reaches this host too."""
    return address.is_loopback or address.is_unspecified


def _origin(parts: SplitResult, host: str) -> tuple[str, int]:
    port = parts.port if parts.port is not None else _DEFAULT_PORTS[parts.scheme.lower()]
    return _canonical_host(host), port


def same_site(a: tuple[str, int], b: tuple[str, int]) -> bool:
    """One host, and the same port, or both on default ports (http:// of an https site)."""
    default = set(_DEFAULT_PORTS.values())
    return a[0] == b[0] and (a[1] == b[1] or {a[1], b[1]} <= default)


def short_origin(base_url: str) -> tuple[str, int]:
    """The (host, port) of the service's own short domain (``SLUICE_BASE_URL``)."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    with contextlib.suppress(Invalid):
        host = _ascii_host(host)
    try:
        return _origin(parts, host)
    except (ValueError, KeyError, Invalid):  # a config this odd protects nothing; refuse nothing
        return "", 0


def check_url(url: str, own: tuple[str, int]) -> str:
    """The target URL to store: absolute http(s) with a host, no credentials, not the
    service itself, at most 2048 characters. Non-ASCII is percent-encoded (IDNA for the host)."""
    url = url.strip()
    if not url:
        raise Invalid("is required")
    if len(url) > URL_MAX:
        raise Invalid(f"must be at most {URL_MAX} characters")
    parts = _split(url)
    host = _ascii_host(parts.hostname or "")
    if same_site(_origin(parts, host), own):
        raise Invalid("must not point at this service's own short links")
    if url.isascii():
        return url
    uri = _as_uri(parts, host)
    if len(uri) > URL_MAX:
        raise Invalid(f"must be at most {URL_MAX} characters once percent-encoded")
    return uri


def check_alias(alias: str, routes: Mapping[str, str] = _NO_ROUTES) -> str:
    """``alias`` if it may name a link. ``routes``: the first segments of the routes
    outside /v1/ (``Apps.reserved_words``, lower-cased), which a link's path would share."""
    if alias.lower() in RESERVED:
        raise Invalid("is a reserved word")
    route = routes.get(alias.lower())
    if route is not None:
        raise Invalid(f"is a reserved word: /{alias} would be the path of the {route}")
    if not ALIAS.fullmatch(alias):
        raise Invalid(
            "must be 3 to 64 characters of A-Z, a-z, 0-9, _ and -, starting with a letter or digit"
        )
    return alias


def check_expiry(value: str, now: datetime) -> datetime:
    """An RFC 3339 time with an offset, in the future; returned in UTC."""
    try:
        moment = msgspec.convert(value, _AwareDatetime)
    except msgspec.ValidationError:
        raise Invalid("must be an RFC 3339 time with an offset (2030-01-01T00:00:00Z)") from None
    if moment <= now:
        raise Invalid("must be in the future")
    try:
        return moment.astimezone(UTC)
    except OverflowError:  # 9999-12-31T23:59:59-14:00 is past the last representable UTC time
        raise Invalid("must be before 10000-01-01T00:00:00Z") from None


# The fields of docs/guides/links.md (issue 18): visit limit, start time, redirect status, tags,
# title.

REDIRECT_STATUSES = (301, 302, 307, 308)
TAGS_MAX = 10
TAG = re.compile(r"[a-z0-9-]{1,32}")
TITLE_MAX = 200


def check_max_visits(value: int) -> int:
    """At least 1: once that many GET redirects were served, the link answers 410."""
    if value < 1:
        raise Invalid("must be an integer of at least 1")
    return value


def check_valid_since(value: str) -> datetime:
    """An RFC 3339 time with an offset (past or future); returned in UTC."""
    try:
        moment = msgspec.convert(value, _AwareDatetime)
        return moment.astimezone(UTC)
    except msgspec.ValidationError:
        raise Invalid("must be an RFC 3339 time with an offset (2030-01-01T00:00:00Z)") from None
    except OverflowError:
        raise Invalid("must be before 10000-01-01T00:00:00Z") from None


def check_redirect_status(value: int) -> int:
    if value not in REDIRECT_STATUSES:
        raise Invalid("must be one of 301, 302, 307 or 308")
    return value


def check_tags(values: list[str]) -> tuple[str, ...]:
    """Up to 10 tags of ``^[a-z0-9-]{1,32}$``, duplicates dropped, first spelling order kept."""
    tags = tuple(dict.fromkeys(values))
    for tag in tags:
        if not TAG.fullmatch(tag):
            raise Invalid(f"{tag[:40]!r} is not 1 to 32 characters of a-z, 0-9 and -")
    if len(tags) > TAGS_MAX:
        raise Invalid(f"must be at most {TAGS_MAX} distinct tags")
    return tags


def check_tag(value: str) -> str:
    """One tag, as the listing's filter takes it."""
    if not TAG.fullmatch(value):
        raise Invalid("must be 1 to 32 characters of a-z, 0-9 and -")
    return value


def check_title(value: str) -> str:
    if len(value) > TITLE_MAX:
        raise Invalid(f"must be at most {TITLE_MAX} characters")
    return value


# docs/guides/links.md password: the bounds of a user's password
# (sluice/builtin/accounts/http/users.py).
PASSWORD_MIN, PASSWORD_MAX = 8, 128


def check_password(value: str) -> str:
    """8 to 128 characters (code points), any of them; stored only as its scrypt hash."""
    if not PASSWORD_MIN <= len(value) <= PASSWORD_MAX:
        raise Invalid(f"must be {PASSWORD_MIN} to {PASSWORD_MAX} characters")
    return value
