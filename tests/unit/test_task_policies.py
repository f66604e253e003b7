"""SLUICE_<TASK>_OVERLAP, _CATCHUP_SECONDS, _JITTER_SECONDS, _TIMEOUT_SECONDS
(docs/guides/tasks.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import structlog.testing

from sluice.app.assembly import all_tasks
from sluice.config import load_config
from sluice.errors import ConfigError
from sluice.scheduler.policy import Policy, describe, jitter


def test_each_task_gets_its_policy_from_the_environment(tmp_path: Path) -> None:
    config = load_config(
        {
            "SLUICE_DATA_DIR": str(tmp_path),
            "SLUICE_TRIM_STREAMS_OVERLAP": "buffer_one",
            "SLUICE_TRIM_STREAMS_CATCHUP_SECONDS": "3600",
            "SLUICE_REFILL_CODE_POOL_JITTER_SECONDS": "30",
            "SLUICE_REFILL_CODE_POOL_TIMEOUT_SECONDS": "900",
        }
    )
    tasks = all_tasks(config)
    assert tasks["trim-streams"].policy == Policy(overlap="buffer_one", catchup_seconds=3600)
    assert tasks["refill-code-pool"].policy == Policy(jitter_seconds=30, timeout_seconds=900)
    assert tasks["reap-consumers"].policy == Policy()
    assert describe(tasks["refill-code-pool"].policy) == (
        "overlap=skip catchup=0s jitter=30s timeout=900s"
    )


@pytest.mark.parametrize(
    ("variable", "value", "words"),
    [
        ("SLUICE_TRIM_STREAMS_OVERLAP", "queue", "must be one of skip | buffer_one"),
        ("SLUICE_TRIM_STREAMS_CATCHUP_SECONDS", "-5", "0 or more"),
        ("SLUICE_TRIM_STREAMS_JITTER_SECONDS", "soon", "number of seconds"),
        ("SLUICE_TRIM_STREAMS_TIMEOUT_SECONDS", "0", "more than 0"),
    ],
)
def test_bad_policy_values_are_refused_at_start(
    tmp_path: Path, variable: str, value: str, words: str
) -> None:
    with pytest.raises(ConfigError, match=variable) as refused:
        load_config({"SLUICE_DATA_DIR": str(tmp_path), variable: value})
    assert words in str(refused.value)


def test_a_policy_for_no_task_is_refused(tmp_path: Path) -> None:
    config = load_config({"SLUICE_DATA_DIR": str(tmp_path), "SLUICE_TRIM_STREEMS_OVERLAP": "skip"})
    with pytest.raises(ConfigError, match="SLUICE_TRIM_STREEMS_OVERLAP names no task"):
        all_tasks(config)


def test_jitter_is_a_function_of_the_task_and_the_occurrence() -> None:
    policy = Policy(jitter_seconds=10)
    slot = datetime(2026, 3, 1, 4, tzinfo=UTC)
    delays = {jitter(policy, "refill-code-pool", slot + timedelta(days=d)) for d in range(50)}
    assert len(delays) == 50 and all(timedelta(0) <= d < timedelta(seconds=10) for d in delays)
    assert jitter(policy, "refill-code-pool", slot) == jitter(policy, "refill-code-pool", slot)
    assert jitter(policy, "a", slot) != jitter(policy, "b", slot)
    assert jitter(Policy(), "a", slot) == timedelta(0)


def test_sluice_extra_tasks_still_loads_its_tasks_and_warns_that_it_is_deprecated(
    tmp_path: Path,
) -> None:
    config = load_config(
        {
            "SLUICE_DATA_DIR": str(tmp_path),
            "SLUICE_EXTRA_TASKS": "tests.integration.scheduler_tasks:tasks",
        }
    )
    with structlog.testing.capture_logs() as logs:
        tasks = all_tasks(config)
    assert "tick" in tasks and "trim-streams" in tasks
    [warning] = [log for log in logs if log["log_level"] == "warning"]
    assert warning["event"].startswith("SLUICE_EXTRA_TASKS is deprecated")
    assert warning["entries"] == ["tests.integration.scheduler_tasks:tasks"]
    with structlog.testing.capture_logs() as quiet:
        all_tasks(load_config({"SLUICE_DATA_DIR": str(tmp_path)}))
    assert not [log for log in quiet if log["log_level"] == "warning"]
