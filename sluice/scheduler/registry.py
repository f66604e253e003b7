"""Every task a process knows: the built-in ones, the apps' (handed over by the process's
assembly, ``sluice.app.assembly``), and those named by SLUICE_EXTRA_TASKS."""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Iterable, Sequence

import structlog

from sluice.config import Config
from sluice.errors import ConfigError
from sluice.scheduler.builtin import Purge, builtin_tasks
from sluice.scheduler.policy import check_names, policy_for
from sluice.scheduler.task_spec import Task

log = structlog.get_logger(__name__)


def _extra(config: Config) -> Iterable[Task]:
    entries = [part.strip() for part in config.extra_tasks.split(",") if part.strip()]
    if entries:
        # Still honoured; an app declares its tasks with @app.task (docs/guides/upgrades.md).
        log.warning(
            "SLUICE_EXTRA_TASKS is deprecated: declare the tasks with @app.task in an app",
            entries=entries,
        )
    for spec in entries:
        module_name, _, attribute = spec.partition(":")
        if not module_name or not attribute:
            raise ConfigError(f"SLUICE_EXTRA_TASKS entry {spec!r} is not 'module:callable'")
        try:
            factory = getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"SLUICE_EXTRA_TASKS entry {spec!r}: {exc}") from exc
        yield from factory(config)


def all_tasks(
    config: Config, app_tasks: Sequence[Task] = (), purges: Sequence[Purge] = ()
) -> dict[str, Task]:
    """Tasks by name, each with its policy: sluice's own (``purge-expired`` running the
    apps' ``purges``), the apps' ``app_tasks`` and SLUICE_EXTRA_TASKS'. A bad schedule, a
    duplicate name or a policy setting for no task is a configuration error."""
    tasks = [*builtin_tasks(config, purges), *app_tasks, *_extra(config)]
    by_name: dict[str, Task] = {}
    for task in tasks:
        if task.name in by_name:
            raise ConfigError(f"two tasks are named {task.name!r}")
        policy = policy_for(config, task.name, task.policy)
        by_name[task.name] = dataclasses.replace(task, policy=policy)
    check_names(config, by_name)
    return by_name
