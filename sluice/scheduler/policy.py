"""A task's scheduling policy (docs/guides/tasks.md): overlap, catch-up window, jitter, timeout.

Read from ``SLUICE_<TASK>_OVERLAP``, ``_CATCHUP_SECONDS``, ``_JITTER_SECONDS`` and
``_TIMEOUT_SECONDS`` (the task's name upper-cased, ``-`` as ``_``), parsed and
checked by ``load_config``. A setting naming no task is refused at start
(``check_names``), so a typo never silently leaves the default in place; a
timeout is the exception, as ``SLUICE_<NAME>_TIMEOUT_SECONDS`` also names
handler groups.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import datetime, timedelta

import msgspec

from sluice.config import Config
from sluice.errors import ConfigError


class Policy(msgspec.Struct, frozen=True, kw_only=True):
    overlap: str = "skip"
    catchup_seconds: float = 0.0
    jitter_seconds: float = 0.0
    timeout_seconds: float | None = None


def policy_for(config: Config, task: str, declared: Policy | None = None) -> Policy:
    """The task's policy: each ``SLUICE_<TASK>_*`` setting given, else what the task
    declared (an app's ``App.task`` defaults), else the defaults."""
    default = declared or Policy()
    return Policy(
        overlap=config.task_overlaps.get(task, default.overlap),
        catchup_seconds=config.task_catchup_seconds.get(task, default.catchup_seconds),
        jitter_seconds=config.task_jitter_seconds.get(task, default.jitter_seconds),
        timeout_seconds=config.group_timeouts.get(task, default.timeout_seconds),
    )


def check_names(config: Config, names: Iterable[str]) -> None:
    """Refuse a policy setting for a task that does not exist (a typo, most likely)."""
    known = set(names)
    for setting, values in (
        ("OVERLAP", config.task_overlaps),
        ("CATCHUP_SECONDS", config.task_catchup_seconds),
        ("JITTER_SECONDS", config.task_jitter_seconds),
    ):
        for name in values:
            if name not in known:
                env_name = name.upper().replace("-", "_")
                raise ConfigError(
                    f"SLUICE_{env_name}_{setting} names no task; known: {', '.join(sorted(known))}"
                )


def jitter(policy: Policy, task: str, slot: datetime) -> timedelta:
    """The delay of one occurrence: up to ``jitter_seconds``, from a hash of the task and
    the slot, so every replica waits the same and the occurrence still runs once."""
    if policy.jitter_seconds <= 0:
        return timedelta(0)
    digest = hashlib.sha256(f"{task}|{slot.isoformat()}".encode()).digest()
    fraction = int.from_bytes(digest[:8], "big") / 2**64
    return timedelta(seconds=fraction * policy.jitter_seconds)


def describe(policy: Policy) -> str:
    """One line for ``sluice tasks list``: every setting, defaults included."""
    timeout = f"{policy.timeout_seconds:g}s" if policy.timeout_seconds else "none"
    return (
        f"overlap={policy.overlap} catchup={policy.catchup_seconds:g}s"
        f" jitter={policy.jitter_seconds:g}s timeout={timeout}"
    )
