"""Redirect rules: a link may send some visitors elsewhere, by device, OS, language or country.

A link holds up to ``MAX_RULES`` rules ``{"when": {device?, os?, language?,
country?}, "url"}``. A rule matches when every condition of its ``when`` holds;
the first rule that matches gives the target, else the link's own URL does.

The facts a rule looks at are worked out from the request lazily, each at most
once per request, and only when a link has rules (``choose`` on an empty list
reads nothing):

- ``device`` (mobile, tablet, desktop) and ``os`` (android, ios, windows, macos,
  linux) from the User-Agent, through ua-parser's patterns (uap-core) as visits use
  them (``sluice.builtin.links.agent_patterns``), cached per User-Agent. iPadOS
  Safari sends the User-Agent of a Mac unless the site asks otherwise, so it counts
  as a macOS desktop; Chrome OS is a desktop of no listed OS.
- ``language``: a rule's language matches when the ``Accept-Language`` header
  accepts it (q > 0) as a primary tag: ``fr-CH;q=0.8`` accepts ``fr``. ``*``
  names no language and matches none. The header's order does not pick among
  rules: the rules' order does.
- ``country``: from the client address (``sluice.http.client_address.client_ip``),
  by ``sluice.builtin.links.geo``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any

from sluice.app import FieldError
from sluice.builtin.links import geo
from sluice.builtin.links.agent_patterns import PREFIX, systems
from sluice.builtin.links.rule_shapes import Rule, When, decode_rules, encode_rules
from sluice.builtin.links.rules import Invalid, check_url

MAX_RULES = 10
DEVICES = ("mobile", "tablet", "desktop")
SYSTEMS = ("android", "ios", "windows", "macos", "linux")
CONDITIONS = ("device", "os", "language", "country")
__all__ = [
    "MAX_RULES",
    "Facts",
    "InvalidRules",
    "Rule",
    "When",
    "accepted_languages",
    "check_rules",
    "choose",
    "decode_rules",
    "encode_rules",
    "platform",
]

_LANGUAGE = re.compile(r"[a-z]{2,3}")
_COUNTRY = re.compile(r"[A-Z]{2}")
_QUALITY = re.compile(r"\s*q\s*=\s*(0(?:\.\d{0,3})?|1(?:\.0{0,3})?)\s*", re.IGNORECASE)
_AL_PREFIX = 512
_AL_ITEMS = 32
# uap-core's OS families, as the five a rule can name.
_SYSTEM_OF = {
    "Android": "android",
    "iOS": "ios",
    "Windows": "windows",
    "Windows Phone": "windows",
    "Windows Mobile": "windows",
    "Mac OS X": "macos",
    "macOS": "macos",
    "Mac OS": "macos",
    "Linux": "linux",
    "Ubuntu": "linux",
    "Kubuntu": "linux",
    "Lubuntu": "linux",
    "Debian": "linux",
    "Fedora": "linux",
    "Red Hat": "linux",
    "CentOS": "linux",
    "Linux Mint": "linux",
    "Arch Linux": "linux",
    "Gentoo": "linux",
    "Slackware": "linux",
    "openSUSE": "linux",
    "SUSE": "linux",
    "Mandriva": "linux",
    "Mageia": "linux",
    "PCLinuxOS": "linux",
    "Puppy": "linux",
}


class InvalidRules(Invalid):
    """Every rule violation, each with its field path (``rules[2].when.os``)."""

    def __init__(self, errors: list[FieldError]) -> None:
        super().__init__("; ".join(f"{e.field}: {e.message}" for e in errors))
        self.errors = errors


@functools.cache
def _countries() -> frozenset[str]:
    """ISO 3166-1 alpha-2 codes, from the ``tzdata`` package's iso3166.tab (all 249)."""
    table = resources.files("tzdata").joinpath("zoneinfo", "iso3166.tab").read_text("utf-8")
    return frozenset(line[:2] for line in table.splitlines() if line and line[0] != "#")


def check_rules(value: object, own: tuple[str, int], field: str = "rules") -> tuple[Rule, ...]:
    """The rules to store, from the request's decoded JSON (``[]`` is no rules).

    Raises ``InvalidRules`` naming every violation; targets follow ``check_url``
    (``own`` is ``short_origin(base_url)``) and are stored as it returns them.
    """
    if not isinstance(value, list):
        raise InvalidRules([FieldError(field, "must be a list of rules ([] for none)")])
    if len(value) > MAX_RULES:
        raise InvalidRules([FieldError(field, f"must have at most {MAX_RULES} rules")])
    errors: list[FieldError] = []
    rules = [_rule(item, own, f"{field}[{i}]", errors) for i, item in enumerate(value)]
    if errors:
        raise InvalidRules(errors)
    return tuple(rule for rule in rules if rule is not None)


def _rule(item: object, own: tuple[str, int], path: str, errors: list[FieldError]) -> Rule | None:
    if not isinstance(item, dict):
        errors.append(FieldError(path, "must be an object with when and url"))
        return None
    before = len(errors)
    for key in (key for key in item if key not in ("when", "url")):
        errors.append(FieldError(f"{path}.{key}", "is not a rule field; a rule has when and url"))
    when = _when(item.get("when"), f"{path}.when", errors)
    url = _url(item.get("url"), own, f"{path}.url", errors)
    if len(errors) > before or when is None or url is None:
        return None
    return Rule(when=when, url=url)


def _url(value: object, own: tuple[str, int], path: str, errors: list[FieldError]) -> str | None:
    if not isinstance(value, str):
        errors.append(FieldError(path, "is required" if value is None else "must be a string"))
        return None
    try:
        return check_url(value, own)
    except Invalid as exc:
        errors.append(FieldError(path, str(exc)))
        return None


def _when(value: object, path: str, errors: list[FieldError]) -> When | None:
    if value is None:
        errors.append(FieldError(path, "is required"))
        return None
    if not isinstance(value, dict):
        errors.append(FieldError(path, "must be an object of conditions: " + ", ".join(CONDITIONS)))
        return None
    if not value:
        errors.append(FieldError(path, "needs at least one of " + ", ".join(CONDITIONS)))
        return None
    before = len(errors)
    for key, condition in value.items():
        message = _condition_error(key, condition)
        if message:
            errors.append(FieldError(f"{path}.{key}", message))
    return When(**value) if len(errors) == before else None


def _condition_error(key: object, value: Any) -> str | None:
    if key == "device":
        return None if value in DEVICES else "must be one of " + ", ".join(DEVICES)
    if key == "os":
        return None if value in SYSTEMS else "must be one of " + ", ".join(SYSTEMS)
    if key == "language":
        ok = isinstance(value, str) and _LANGUAGE.fullmatch(value)
        return None if ok else "must be a primary language tag: 2 or 3 lower-case letters (en, fr)"
    if key == "country":
        if not (isinstance(value, str) and _COUNTRY.fullmatch(value)):
            return "must be an ISO 3166-1 alpha-2 country code in upper case (FR, US)"
        return None if value in _countries() else "is not an ISO 3166-1 country code"
    return "is not a condition; use " + ", ".join(CONDITIONS)


class Facts:
    """What rules look at in one request, each worked out on first use (see the module doc)."""

    def __init__(
        self,
        user_agent: str | None,
        accept_language: str | None,
        address: Callable[[], geo.Address | str | None] = lambda: None,
    ) -> None:
        self._user_agent = user_agent or ""
        self._accept_language = accept_language or ""
        self._address = address

    @functools.cached_property
    def device(self) -> str | None:
        return platform(self._user_agent)[0]

    @functools.cached_property
    def os(self) -> str | None:
        return platform(self._user_agent)[1]

    @functools.cached_property
    def languages(self) -> tuple[str, ...]:
        return accepted_languages(self._accept_language)

    @functools.cached_property
    def country(self) -> str | None:
        return geo.country_of(self._address())


def choose(rules: Sequence[Rule], facts: Facts) -> str | None:
    """The target of the first rule whose conditions all hold; None when none does."""
    for rule in rules:
        if _holds(rule.when, facts):
            return rule.url
    return None


def _holds(when: When, facts: Facts) -> bool:
    # Cheapest facts first: a User-Agent not yet cached costs about 0.05 ms to parse.
    return (
        (when.language is None or when.language in facts.languages)
        and (when.country is None or when.country == facts.country)
        and (when.os is None or when.os == facts.os)
        and (when.device is None or when.device == facts.device)
    )


@functools.lru_cache(maxsize=2048)
def platform(user_agent: str) -> tuple[str | None, str | None]:
    """(device, os) of a User-Agent, each None when it cannot be told."""
    ua = user_agent[:PREFIX]  # as visits: enough for every pattern (agent_patterns)
    parsed = systems().first(ua) if ua else None
    system = _SYSTEM_OF.get(parsed.family) if parsed is not None else None
    return _device(ua, system), system


def _device(ua: str, system: str | None) -> str | None:
    if system == "ios":
        return "tablet" if "iPad" in ua else "mobile"
    if system == "android":  # Android tablets leave "Mobile" out (Google's convention)
        return "mobile" if "Mobile" in ua else "tablet"
    if "Windows Phone" in ua or "Mobi" in ua:  # "Mobi" anywhere: a phone (MDN's advice)
        return "mobile"
    if system in ("windows", "macos", "linux") or "CrOS" in ua:
        return "desktop"
    return None


@functools.lru_cache(maxsize=1024)
def accepted_languages(header: str) -> tuple[str, ...]:
    """The primary tags an Accept-Language header accepts (q > 0), most preferred first."""
    best: dict[str, float] = {}
    for item in header[:_AL_PREFIX].split(",")[:_AL_ITEMS]:
        tag, _, params = item.partition(";")
        primary = tag.strip().partition("-")[0].lower()
        if not _LANGUAGE.fullmatch(primary):
            continue  # "*", "x-private", garbage
        if params:
            match = _QUALITY.fullmatch(params)
            if match is None:
                continue  # a q we cannot read: not a language the client asked for
            quality = float(match[1])
        else:
            quality = 1.0
        best[primary] = max(best.get(primary, 0.0), quality)
    ranked = sorted(best.items(), key=lambda pair: -pair[1])  # stable: header order on ties
    return tuple(language for language, quality in ranked if quality > 0)
