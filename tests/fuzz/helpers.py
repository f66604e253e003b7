"""What the fuzz tests share: the admin token of the served app and the ``Seed`` of what
exists before the fuzzer starts (the fixtures are in ``tests/fuzz/conftest.py``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

ADMIN_TOKEN = "fuzz-admin-token-0123456789abcdef"


@dataclass
class Seed:
    """What exists before the fuzzer starts: path parameters worth trying besides random ones."""

    base_url: str
    user_token: str
    # A new token of the same user, for the logout route (it revokes the token it carries).
    fresh_token: Callable[[], str]
    codes: list[str] = field(default_factory=list)
    job_ids: list[str] = field(default_factory=list)
    reminder_ids: list[str] = field(default_factory=list)
    task_names: list[str] = field(default_factory=list)
