"""What a redirect learns from its User-Agent, and what an agent never seen costs
(docs/guides/security.md, "What a client costs the logs and the event loop")."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import crawleruseragents
import pytest
import ua_parser

from sluice.builtin.links import agent_patterns, visits
from sluice.builtin.links.agent_patterns import PREFIX, systems
from sluice.builtin.links.agents import describe
from sluice.builtin.links.targeting import platform
from tests import user_agents
from tests.link_helpers import CHROME, FACEBOOK, FIREFOX, GOOGLEBOT, SLACKBOT
from tests.user_agents import ANDROID_PHONE, MAC_SAFARI, unseen

# Real agents: the browsers and bots the other tests use, ...
BROWSERS = [CHROME, FIREFOX, GOOGLEBOT, SLACKBOT, FACEBOOK] + [
    value for name, value in vars(user_agents).items() if name.isupper() and type(value) is str
]
# ... and every example the crawler list ships with its patterns (~2,000).
CRAWLERS = [
    agent
    for item in crawleruseragents.CRAWLER_USER_AGENTS_DATA
    for agent in item.get("instances", [])
]
# What classification used to run: ua-parser's own resolver, the crawler list's own test.
LIBRARY = ua_parser.Parser(ua_parser.BasicResolver(ua_parser.load_builtins()))


def by_the_libraries(agent: str) -> tuple[str, bool, str | None]:
    ua = agent[:512]
    parsed = LIBRARY.parse_user_agent(ua)
    system = LIBRARY.parse_os(ua)
    return (
        parsed.family if parsed else "Other",
        bool(crawleruseragents.is_crawler(ua)),
        system.family if system else None,
    )


def test_every_real_agent_is_told_as_the_libraries_tell_it() -> None:
    """Browser family, bot or not, and OS: the screened patterns answer exactly as
    ua-parser's resolver and the crawler list's test, over every agent they ship."""
    assert len(CRAWLERS) > 1500 and len(BROWSERS) > 10
    wrong = []
    for agent in BROWSERS + CRAWLERS:
        browser, is_bot = visits.classify.__wrapped__(agent)
        system = visits_os(agent)
        if (browser, is_bot, system) != by_the_libraries(agent):
            wrong.append((agent, (browser, is_bot, system), by_the_libraries(agent)))
    assert not wrong, wrong[:5]


def test_without_the_regex_parser_every_pattern_is_tried_and_answers_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``re._parser`` is private to CPython: where it is missing, the screen tries every
    pattern (the libraries' cost) and still answers as they do."""
    monkeypatch.setattr(agent_patterns, "sre_parse", None)
    assert agent_patterns.needs("Googlebot") is None
    screened = agent_patterns.Screened((m.regex, 0, m) for m in ua_parser.load_builtins()[1])
    for agent in BROWSERS + CRAWLERS[:200]:
        found = screened.first(agent[:PREFIX])
        system = LIBRARY.parse_os(agent)
        assert (found.family if found else None) == (system.family if system else None), agent


def visits_os(agent: str) -> str | None:
    found = systems().first(agent[:PREFIX])
    return found.family if found else None


def test_a_real_agent_still_gets_its_browser_os_and_device() -> None:
    agent = describe(ANDROID_PHONE)
    assert (agent.browser, agent.is_bot, agent.os, agent.device) == (
        "Chrome Mobile",
        False,
        "android",
        "mobile",
    )
    bot = describe(GOOGLEBOT)
    assert (bot.browser, bot.is_bot) == ("Googlebot", True)
    assert platform(MAC_SAFARI) == ("desktop", "macos")


def cpu_seconds(classify: Callable[[str], Any], agents: list[str]) -> float:
    started = time.process_time()
    for agent in agents:
        classify(agent)
    return time.process_time() - started


def test_an_agent_of_random_characters_costs_a_fraction_of_a_full_parse() -> None:
    """The finding: 1,000 redirects with random 500-character User-Agents took 6.33 s
    against 0.43 s with one agent: each ran every pattern of both libraries over 512
    characters (~3 ms). CPU time of this process, in rounds that alternate the two, the
    best round of each: another process's load moves both alike."""
    describe("warm-up")
    by_the_libraries("warm-up")
    ours, theirs = [], []
    for _ in range(5):
        agents_ = unseen(40)
        ours.append(cpu_seconds(describe, agents_))
        theirs.append(cpu_seconds(by_the_libraries, agents_))
    assert min(ours) < 0.35 * min(theirs), (ours, theirs)


def test_agents_alike_in_their_first_256_characters_are_classified_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client that varies only the end of a long User-Agent gets no parse of its own per
    request: classification reads the first 256 characters, and its cache is keyed by them."""
    parsed: list[str] = []
    classify = visits.classify.__wrapped__

    def counted(agent: str) -> tuple[str, bool]:
        parsed.append(agent)
        return classify(agent)

    monkeypatch.setattr(visits.classify, "__wrapped__", counted)
    head = unseen(1, 256)[0]
    answers = {describe(head + tail) for tail in unseen(50, 244)}
    assert len(parsed) == 1, f"{len(parsed)} parses of {len(parsed[0])} characters"
    assert len(answers) == 1
    assert describe(head) in answers
