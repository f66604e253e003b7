"""One cached lookup per User-Agent gives what a visit records: browser, bot, device, OS,
the same answers as the browser classification and the redirect rules' mapping."""

from __future__ import annotations

import pytest

from sluice.builtin.links.agents import Agent, cache_info, describe
from tests.link_helpers import GOOGLEBOT
from tests.user_agents import ANDROID_PHONE, IPAD, MAC_SAFARI, WINDOWS_CHROME


@pytest.mark.parametrize(
    ("user_agent", "agent"),
    [
        (ANDROID_PHONE, Agent("Chrome Mobile", False, "mobile", "android")),
        (IPAD, Agent("Chrome Mobile iOS", False, "tablet", "ios")),
        (WINDOWS_CHROME, Agent("Chrome", False, "desktop", "windows")),
        (MAC_SAFARI, Agent("Safari", False, "desktop", "macos")),
        (GOOGLEBOT, Agent("Googlebot", True, None, None)),
        ("", Agent("Other", False, None, None)),
    ],
)
def test_a_user_agent_is_described_once(user_agent: str, agent: Agent) -> None:
    assert describe(user_agent) == agent
    hits = cache_info().hits
    assert describe(user_agent) is describe(user_agent)
    assert cache_info().hits == hits + 2
