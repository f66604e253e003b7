"""Tasks for scheduler tests, loaded by real ``sluice scheduler`` / ``sluice tasks``
processes through ``SLUICE_EXTRA_TASKS=tests.integration.scheduler_tasks:tasks``.

Their effects go to Redis lists, so a test can count them across processes.
"""

from __future__ import annotations

import asyncio
import os

from sluice.config import Config
from sluice.scheduler.cron import parse_cron
from sluice.scheduler.task_spec import Task, TaskContext

BATCHES = 20


def effects_key(task: str) -> str:
    return f"test:effects:{task}"


async def _effect(ctx: TaskContext, item: str) -> None:
    await ctx.resources.redis.rpush(effects_key(ctx.run.task), f"{ctx.run.id} {item}")


async def tick(ctx: TaskContext) -> None:
    await _effect(ctx, ctx.run.scheduled_for.isoformat())


async def long_run(ctx: TaskContext) -> None:
    """Outlives the lock TTL the tests set (1.5 s); only renewal keeps the lock."""
    await asyncio.sleep(float(os.environ.get("TEST_LONG_SECONDS", "2.5")))
    await _effect(ctx, ctx.run.scheduled_for.isoformat())


async def overrun(ctx: TaskContext) -> None:
    """Outlives its period when the test says so (scheduling policies, docs/guides/tasks.md)."""
    await _effect(ctx, f"start {ctx.run.scheduled_for.isoformat()}")
    await asyncio.sleep(float(os.environ.get("TEST_OVERRUN_SECONDS", "3")))
    await _effect(ctx, f"end {ctx.run.scheduled_for.isoformat()}")


async def batches(ctx: TaskContext) -> None:
    """A checkpointed batch task: one effect and one checkpoint per batch."""
    start = int(ctx.cursor) + 1 if ctx.cursor is not None else 0
    for batch in range(start, BATCHES):
        await asyncio.sleep(0.1)
        await _effect(ctx, str(batch))
        await ctx.checkpoint(str(batch))


def tasks(config: Config) -> list[Task]:
    never = parse_cron("0 0 0 1 1 *", "UTC")  # manual runs only, in practice
    return [
        Task("tick", parse_cron(os.environ.get("TEST_TICK_CRON", "*/2 * * * * *"), "UTC"), tick),
        Task(
            "long", parse_cron(os.environ.get("TEST_LONG_CRON", "*/5 * * * * *"), "UTC"), long_run
        ),
        Task("batches", never, batches),
        # Runs only in the tests that give it a schedule.
        Task(
            "overrun",
            parse_cron(os.environ.get("TEST_OVERRUN_CRON", "0 0 0 1 1 *"), "UTC"),
            overrun,
        ),
    ]
