"""Redirect rules: what a link may hold (422s name the field) and whom each rule sends where."""

from __future__ import annotations

import ipaddress
from importlib import resources
from typing import Any

import pytest

from sluice.builtin.links.rules import Invalid, short_origin
from sluice.builtin.links.targeting import (
    MAX_RULES,
    Facts,
    InvalidRules,
    Rule,
    When,
    accepted_languages,
    check_rules,
    choose,
    decode_rules,
    encode_rules,
    platform,
)
from tests.user_agents import (
    ANDROID_PHONE,
    ANDROID_TABLET,
    CURL,
    IPAD,
    IPHONE,
    LINUX_FIREFOX,
    MAC_SAFARI,
    UBUNTU_FIREFOX,
    WINDOWS_CHROME,
)

OWN = short_origin("https://sho.rt")


def rule(url: str = "https://example.com/", **when: Any) -> dict[str, Any]:
    return {"when": when, "url": url}


def errors_of(value: object) -> dict[str, str]:
    with pytest.raises(InvalidRules) as caught:
        check_rules(value, OWN)
    return {error.field: error.message for error in caught.value.errors}


# --- validation ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rules", "field", "message"),
    [
        (None, "rules", "must be a list"),
        ({"when": {"os": "ios"}}, "rules", "must be a list"),
        ([rule(os="ios")] * (MAX_RULES + 1), "rules", f"at most {MAX_RULES} rules"),
        (["https://example.com/"], "rules[0]", "must be an object with when and url"),
        ([{"url": "https://example.com/"}], "rules[0].when", "is required"),
        ([{"when": "ios", "url": "https://example.com/"}], "rules[0].when", "must be an object"),
        ([rule()], "rules[0].when", "needs at least one of device, os, language, country"),
        ([rule(os="ios"), rule(browser="chrome")], "rules[1].when.browser", "is not a condition"),
        (
            [{"when": {"os": "ios"}, "url": "https://a.example/", "to": 1}],
            "rules[0].to",
            "is not a rule field",
        ),
        ([rule(device="watch")], "rules[0].when.device", "one of mobile, tablet, desktop"),
        ([rule(device="Mobile")], "rules[0].when.device", "one of mobile, tablet, desktop"),
        ([rule(os="beos")], "rules[0].when.os", "one of android, ios, windows, macos, linux"),
        ([rule(os="iOS")], "rules[0].when.os", "one of android, ios, windows, macos, linux"),
        ([rule(os=None)], "rules[0].when.os", "one of android, ios, windows, macos, linux"),
        ([rule(language="EN")], "rules[0].when.language", "2 or 3 lower-case letters"),
        ([rule(language="en-US")], "rules[0].when.language", "2 or 3 lower-case letters"),
        ([rule(language="e")], "rules[0].when.language", "2 or 3 lower-case letters"),
        ([rule(language=7)], "rules[0].when.language", "2 or 3 lower-case letters"),
        ([rule(country="fr")], "rules[0].when.country", "alpha-2 country code in upper case"),
        ([rule(country="FRA")], "rules[0].when.country", "alpha-2 country code in upper case"),
        ([rule(country="UK")], "rules[0].when.country", "is not an ISO 3166-1 country code"),
        ([rule(country="ZZ")], "rules[0].when.country", "is not an ISO 3166-1 country code"),
        ([{"when": {"os": "ios"}}], "rules[0].url", "is required"),
        ([rule(url=42, os="ios")], "rules[0].url", "must be a string"),  # type: ignore[arg-type]
        ([rule("ftp://example.com/", os="ios")], "rules[0].url", "http or https"),
        ([rule("/relative", os="ios")], "rules[0].url", "absolute http or https URL"),
        ([rule("https://user:pw@example.com/", os="ios")], "rules[0].url", "user name"),
        ([rule("https://sho.rt/abc", os="ios")], "rules[0].url", "this service's own"),
        ([rule("https://example.com/" + "a" * 2100, os="ios")], "rules[0].url", "at most 2048"),
    ],
)
def test_every_invalid_rule_is_named_by_its_field_path(
    rules: object, field: str, message: str
) -> None:
    errors = errors_of(rules)
    assert field in errors, errors
    assert message in errors[field]


def test_one_error_lists_every_violation_of_every_rule() -> None:
    errors = errors_of(
        [
            rule(os="ios"),
            rule("ftp://x.example/", device="watch", country="fr"),
            {"when": {}},
        ]
    )
    assert set(errors) == {
        "rules[1].when.device",
        "rules[1].when.country",
        "rules[1].url",
        "rules[2].when",
        "rules[2].url",
    }


def test_the_errors_are_link_rule_errors_with_a_readable_message() -> None:
    with pytest.raises(Invalid, match=r"rules\[0\]\.when\.os: must be one of"):
        check_rules([rule(os="beos")], OWN)


def test_valid_rules_come_back_as_rules_with_their_targets_normalised() -> None:
    checked = check_rules(
        [
            rule("https://apps.apple.com/app/id1", os="ios", device="mobile"),
            rule("https://bücher.example/ü", language="de", country="DE"),
        ],
        OWN,
    )
    assert checked == (
        Rule(when=When(os="ios", device="mobile"), url="https://apps.apple.com/app/id1"),
        Rule(when=When(language="de", country="DE"), url="https://xn--bcher-kva.example/%C3%BC"),
    )


def test_ten_rules_are_allowed_and_none_is_no_rules() -> None:
    assert len(check_rules([rule(os="ios")] * MAX_RULES, OWN)) == MAX_RULES
    assert check_rules([], OWN) == ()


def test_every_iso_3166_country_is_accepted() -> None:
    table = resources.files("tzdata").joinpath("zoneinfo", "iso3166.tab").read_text("utf-8")
    codes = [line[:2] for line in table.splitlines() if line and not line.startswith("#")]
    assert len(codes) == 249
    assert len(check_rules([rule(country=code) for code in codes[:MAX_RULES]], OWN)) == 10
    for code in ("FR", "US", "GB", "JP", "BR", "SS"):
        assert check_rules([rule(country=code)], OWN)


def test_rules_are_stored_as_json_text_and_read_back() -> None:
    checked = check_rules([rule(os="android"), rule(language="fr", country="CA")], OWN)
    text = encode_rules(checked)
    assert text == (
        '[{"when":{"os":"android"},"url":"https://example.com/"},'
        '{"when":{"language":"fr","country":"CA"},"url":"https://example.com/"}]'
    )
    assert decode_rules(text) == checked
    assert decode_rules(text.encode()) == checked


def test_no_rules_are_stored_as_null() -> None:
    assert encode_rules(()) is None
    assert decode_rules(None) == ()
    assert decode_rules("") == ()


# --- facts -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("user_agent", "device", "system"),
    [
        (IPHONE, "mobile", "ios"),
        (ANDROID_PHONE, "mobile", "android"),
        (IPAD, "tablet", "ios"),
        (ANDROID_TABLET, "tablet", "android"),
        (WINDOWS_CHROME, "desktop", "windows"),
        (MAC_SAFARI, "desktop", "macos"),
        (LINUX_FIREFOX, "desktop", "linux"),
        (UBUNTU_FIREFOX, "desktop", "linux"),
        (CURL, None, None),
        ("", None, None),
    ],
)
def test_device_and_os_of_real_user_agents(
    user_agent: str, device: str | None, system: str | None
) -> None:
    assert platform(user_agent) == (device, system)


@pytest.mark.parametrize(
    ("header", "languages"),
    [
        ("fr-CH, fr;q=0.9, en;q=0.8, de;q=0.7, *;q=0.5", ("fr", "en", "de")),
        ("en;q=0.2, de", ("de", "en")),
        ("EN-gb", ("en",)),
        ("de;q=0, en", ("en",)),
        ("es;q=oops, pt", ("pt",)),
        ("*", ()),
        ("", ()),
    ],
)
def test_the_languages_a_client_accepts(header: str, languages: tuple[str, ...]) -> None:
    assert accepted_languages(header) == languages


# --- matching --------------------------------------------------------------------

NL_ADDRESS = ipaddress.ip_address("193.0.6.139")  # RIPE NCC, Amsterdam
DE_ADDRESS = ipaddress.ip_address("2001:638::1")  # DFN, the German research network

APP_RULES = check_rules(
    [
        rule("https://apps.apple.com/app", os="ios"),
        rule("https://play.google.com/app", os="android"),
        rule("https://example.com/windows", os="windows"),
        rule("https://example.com/mac", os="macos"),
        rule("https://example.com/linux", os="linux"),
    ],
    OWN,
)


def facts(user_agent: str = "", language: str = "", address: object = None) -> Facts:
    return Facts(user_agent, language, lambda: address)  # type: ignore[arg-type, return-value]


@pytest.mark.parametrize(
    ("user_agent", "target"),
    [
        (IPHONE, "https://apps.apple.com/app"),
        (IPAD, "https://apps.apple.com/app"),
        (ANDROID_PHONE, "https://play.google.com/app"),
        (WINDOWS_CHROME, "https://example.com/windows"),
        (MAC_SAFARI, "https://example.com/mac"),
        (LINUX_FIREFOX, "https://example.com/linux"),
    ],
)
def test_an_os_rule_sends_its_system_to_its_target(user_agent: str, target: str) -> None:
    assert choose(APP_RULES, facts(user_agent)) == target


@pytest.mark.parametrize(
    ("user_agent", "target"),
    [
        (IPHONE, "https://m.example/"),
        (ANDROID_PHONE, "https://m.example/"),
        (IPAD, "https://tablet.example/"),
        (WINDOWS_CHROME, "https://desktop.example/"),
        (MAC_SAFARI, "https://desktop.example/"),
        (LINUX_FIREFOX, "https://desktop.example/"),
    ],
)
def test_a_device_rule_sends_its_device_to_its_target(user_agent: str, target: str) -> None:
    rules = check_rules(
        [
            rule("https://m.example/", device="mobile"),
            rule("https://tablet.example/", device="tablet"),
            rule("https://desktop.example/", device="desktop"),
        ],
        OWN,
    )
    assert choose(rules, facts(user_agent)) == target


def test_a_language_rule_matches_any_language_the_client_accepts() -> None:
    rules = check_rules([rule("https://example.fr/", language="fr")], OWN)
    assert choose(rules, facts(language="fr-FR,fr;q=0.9")) == "https://example.fr/"
    assert choose(rules, facts(language="en-US, fr;q=0.1")) == "https://example.fr/"
    assert choose(rules, facts(language="en-US, fr;q=0")) is None
    assert choose(rules, facts(language="*")) is None
    assert choose(rules, facts()) is None


def test_a_country_rule_matches_the_country_of_the_client_address() -> None:
    rules = check_rules(
        [rule("https://example.nl/", country="NL"), rule("https://example.de/", country="DE")],
        OWN,
    )
    assert choose(rules, facts(address=NL_ADDRESS)) == "https://example.nl/"
    assert choose(rules, facts(address=DE_ADDRESS)) == "https://example.de/"
    assert choose(rules, facts(address=ipaddress.ip_address("10.0.0.1"))) is None
    assert choose(rules, facts(address=None)) is None


def test_every_condition_of_a_rule_must_hold() -> None:
    rules = check_rules(
        [rule("https://nl-ios.example/", os="ios", language="nl", country="NL")], OWN
    )
    assert choose(rules, facts(IPHONE, "nl-NL", NL_ADDRESS)) == "https://nl-ios.example/"
    assert choose(rules, facts(ANDROID_PHONE, "nl-NL", NL_ADDRESS)) is None
    assert choose(rules, facts(IPHONE, "en-GB", NL_ADDRESS)) is None
    assert choose(rules, facts(IPHONE, "nl-NL", DE_ADDRESS)) is None


def test_the_first_rule_that_matches_wins() -> None:
    rules = check_rules(
        [
            rule("https://first.example/", device="mobile"),
            rule("https://second.example/", os="ios"),
            rule("https://third.example/", language="en"),
        ],
        OWN,
    )
    assert choose(rules, facts(IPHONE, "en")) == "https://first.example/"
    assert choose(rules, facts(IPAD, "en")) == "https://second.example/"
    assert choose(rules, facts(WINDOWS_CHROME, "en")) == "https://third.example/"


def test_when_no_rule_matches_there_is_no_target() -> None:
    assert choose(APP_RULES, facts(CURL)) is None
    assert choose(APP_RULES, facts()) is None
    assert choose((), facts(IPHONE)) is None


def _unreachable() -> None:
    raise AssertionError("the client address was looked at")


def test_a_link_without_rules_reads_nothing_of_the_request() -> None:
    seen = Facts(IPHONE, "en", _unreachable)
    assert choose((), seen) is None
    assert not {"device", "os", "languages", "country"} & vars(seen).keys()


def test_facts_no_rule_needs_are_never_worked_out() -> None:
    rules = check_rules([rule("https://example.fr/", language="fr", os="ios")], OWN)
    seen = Facts(IPHONE, "en", _unreachable)
    assert choose(rules, seen) is None  # the language fails: the User-Agent is not parsed
    assert vars(seen).keys() & {"device", "os", "languages", "country"} == {"languages"}
