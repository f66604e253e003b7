"""What each ``sluice`` command does, given a loaded config.

The long-running processes, the HTTP app and the handler groups (with ``sluice status``
and ``sluice dlq``, in ``sluice.cli.stream_commands``) are imported by the commands that run
them: a one-shot command (``sluice replay`` above all, whose time is measured from the
process's start) does not pay for importing the whole service.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable, Sequence

import msgspec

from sluice.aio.waiting import first_of
from sluice.app.assembly import Parts, assemble
from sluice.cli.ports import check_listenable
from sluice.config import Config
from sluice.config.database_url import redacted
from sluice.embedded.redis_server import RedisServer, announced_url
from sluice.errors import ConfigError
from sluice.events import utcnow
from sluice.process.stop_signals import stop_on_signals
from sluice.projections.replay import rebuild
from sluice.security.secret_files import ADMIN_TOKEN_FILE, load_or_create_secret
from sluice.store import Store
from sluice.store.copy import CopyError, copy_store
from sluice.store.migrate import CORE
from sluice.telemetry import tracing


def with_redis(config: Config) -> Config:
    """Use the cluster of SLUICE_REDIS_CLUSTER_NODES or SLUICE_REDIS_URL, else the
    embedded Redis a running ``sluice up`` announced (with the password kept beside its
    URL)."""
    if config.redis_url or config.cluster:
        return config
    announced = announced_url(config.data_dir)
    if announced is not None:
        return msgspec.structs.replace(config, redis_url=announced)
    raise ConfigError("SLUICE_REDIS_URL is not set and no `sluice up` is running in this data dir")


async def _ensure_admin_token(config: Config, store: Store) -> Config:
    """Generate the admin token into the data dir once (print it only then), and record
    its hash in the database, where APIs on other hosts find it."""
    if config.admin_token:
        return config
    path = config.data_dir / ADMIN_TOKEN_FILE
    token, created = load_or_create_secret(path)
    if created:
        print(f"admin token (shown once, kept in {path}, mode 0600): {token}", flush=True)
    else:
        print(f"admin token: kept in {path}", flush=True)
    from sluice.http.admin_token import record_generated

    await record_generated(store, token)
    return msgspec.structs.replace(config, admin_token=token)


# The pages ``sluice up`` names once it listens: those the loaded apps serve (without the
# operations app, SLUICE_APPS=shop, there is no /admin).
_PAGES = (("API docs", "/docs"), ("operations", "/admin"))


def _pages(parts: Parts) -> str:
    from sluice.http.openapi import routes_of

    config = parts.config
    served = {route.path for route in routes_of(parts.apps) if route.method == "GET"}
    return "  ".join(
        f"{label}: {config.base_url}{path}" for label, path in _PAGES if path in served
    )


async def up(parts: Parts) -> int:
    from sluice.cli.processes import run_all

    stop = stop_on_signals()
    # Before the token is shown and Redis started: a port in use ends here, in one line,
    # and so do apps that are not the deployment's (sluice.store.app_set).
    config = parts.config
    check_listenable(config.host, config.port)
    store = await parts.open_store()
    try:
        config = await _ensure_admin_token(config, store)
    finally:
        await store.close()
    server: RedisServer | None = None
    if not (config.redis_url or config.cluster):
        server = RedisServer.in_data_dir(config.data_dir)
        server.start()
        config = msgspec.structs.replace(config, redis_url=server.url)
    try:
        if server is not None:
            server.announce()
        listening = asyncio.Event()
        parts = Parts(config, parts.apps)
        everything = asyncio.create_task(run_all(parts, stop, listening))
        await first_of(listening, stop)
        if listening.is_set():
            redis = (
                f"cluster {config.redis_cluster_nodes}"
                if config.cluster
                else redacted(config.redis_url or "")
            )
            print(f"sluice is up: {config.base_url}  (redis: {redis})", flush=True)
            if pages := _pages(parts):
                print(pages, flush=True)
            print("press Ctrl-C to stop", flush=True)
        await everything
    finally:
        if server is not None:
            server.withdraw()
            server.stop()
    print("sluice stopped", flush=True)
    return 0


async def dispatch(config: Config, args: argparse.Namespace) -> int:
    """Run the command; a long-running process traces when the environment asks for it
    (docs/guides/tracing.md), and exports its last spans as it stops."""
    traced = args.command == "up" or args.command in _SERVICES
    if traced:
        tracing.configure("sluice")
    try:
        return await _dispatch(config, args)
    finally:
        if traced and tracing.ENABLED:
            await asyncio.to_thread(tracing.shutdown)


async def _dispatch(config: Config, args: argparse.Namespace) -> int:
    command = args.command
    # First: an app that cannot load (or is refused) stops every command at once, before
    # anything starts, with the message naming it.
    parts = assemble(config)
    if getattr(args, "change_apps", False):  # on purpose, before any other part opens it
        print(migrated(await parts.migrate_store(change_apps=True)))
        print(f"the deployment's apps: {', '.join(parts.apps.names())}", flush=True)
    if command == "up":
        return await up(parts)
    if command == "copy-store":
        return await copy_store_command(config, args)
    if command == "events":  # the store alone: no Redis needed
        return await events_command(config, args)
    if command == "aggregates":  # the store alone too
        from sluice.cli.aggregate_commands import aggregates_command

        return await aggregates_command(parts, args)
    if command == "groups":  # the store alone too
        from sluice.cli.group_commands import groups_command

        return await groups_command(config, args)
    if command == "migrate":
        if not args.change_apps:
            print(migrated(await parts.migrate_store()))
        return 0
    config = with_redis(config)
    if command in _SERVICES:
        await _SERVICES[command](config, args)
        return 0
    return await _TOOLS[command](config, args)


def migrated(applied: Sequence[str]) -> str:
    """What ``sluice migrate`` says of the steps it ran (``owner:version``, in order):
    whether it created the database, and each owner's versions, run together
    (``sluice:1-29, links:1-14``)."""
    if not applied:
        return "database is up to date: nothing to apply"
    versions: dict[str, list[int]] = {}
    for step in applied:
        owner, _, version = step.rpartition(":")
        versions.setdefault(owner, []).append(int(version))
    spans = ", ".join(f"{owner}:{_runs(numbers)}" for owner, numbers in versions.items())
    what = "database created" if f"{CORE}:1" in applied else "database migrated"
    steps = "1 migration step" if len(applied) == 1 else f"{len(applied)} migration steps"
    return f"{what}: {steps} applied ({spans})"


def _runs(numbers: list[int]) -> str:
    """``[1, 2, 3, 5]`` as ``1-3,5``."""
    runs: list[list[int]] = []
    for number in numbers:
        if runs and number == runs[-1][-1] + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


async def events_command(config: Config, args: argparse.Namespace) -> int:
    from sluice.history import search as event_search
    from sluice.history.search import EventQuery, search

    parts = assemble(config)  # the apps' event types and aggregates are searchable too
    if args.aggregate is not None and ":" in args.aggregate:
        from sluice.cli.aggregate_commands import aggregate_events

        return await aggregate_events(parts, args)
    for flag, check in (("type", event_search.event_type), ("aggregate", event_search.aggregate)):
        value = getattr(args, flag)
        if value is None:
            continue
        try:
            check(value)
        except event_search.Invalid as exc:
            print(f"sluice events: error: argument --{flag}: {value!r} {exc}", file=sys.stderr)
            return 2
    query = EventQuery(
        type=args.type,
        aggregate=args.aggregate,
        trace_id=args.trace_id,
        since=args.since,
        until=args.until,
        limit=args.limit,
        after=args.cursor,
    )
    store = await parts.open_store()
    try:
        page = await search(store, query)
    finally:
        await store.close()
    if args.json:
        print(msgspec.json.encode(page).decode())
        return 0
    for e in page.items:
        print(f"{e.seq}  {e.created_at}  {e.type:<22} {e.aggregate:<10} {e.trace_id}  {e.event_id}")
    if page.next_cursor is not None:
        print(f"more: --cursor {page.next_cursor}")
    if page.hot_since is not None:
        print(f"searched back to {page.hot_since}; older events are archived and not searched")
    return 0


async def copy_store_command(config: Config, args: argparse.Namespace) -> int:
    try:
        result = await copy_store(
            config.database_url,
            args.to,
            batch=args.batch,
            progress=not args.no_progress,
            steps=assemble(config).apps.migrations,
        )
    except CopyError as exc:
        print(f"copy-store: {exc}", file=sys.stderr)
        return 1
    for name in result.skipped:
        print(f"skipped {name}: left over from an interrupted `sluice replay`")
    for name, rows in sorted(result.tables.items()):
        print(f"  {name:<32} {rows:>12,}")
    rate = result.rows / result.seconds if result.seconds else 0.0
    print(
        f"copied {len(result.tables)} tables, {result.rows:,} rows in {result.seconds:.1f} s"
        f" ({rate:,.0f} rows/s) to {redacted(args.to)}; counts checked"
    )
    return 0


async def _api(config: Config, args: argparse.Namespace) -> None:
    if args.processes is not None:
        config = msgspec.structs.replace(config, api_processes=args.processes)
    if config.api_processes > 1:
        from sluice.cli.api_processes import supervise

        await supervise(config, stop_on_signals())
    else:
        from sluice.cli.processes import run_api

        await run_api(assemble(config), stop_on_signals(), reuse_port=args.reuse_port)


async def _relay(config: Config, args: argparse.Namespace) -> None:
    from sluice.cli.processes import run_relay

    await run_relay(assemble(config), stop_on_signals())


async def _scheduler(config: Config, args: argparse.Namespace) -> None:
    from sluice.cli.processes import run_scheduler

    await run_scheduler(assemble(config), stop_on_signals())


async def _worker(config: Config, args: argparse.Namespace) -> None:
    from sluice.cli.processes import run_worker

    await run_worker(assemble(config), args.groups, stop_on_signals(), args.consumer)


async def _replay(config: Config, args: argparse.Namespace) -> int:
    return await replay(config, args.projection, progress=not args.no_progress)


async def _flow(config: Config, args: argparse.Namespace) -> int:
    from sluice.cli.flow_commands import flow_command

    return await flow_command(config, args)


async def _status(config: Config, args: argparse.Namespace) -> int:
    from sluice.cli.stream_commands import show_status

    return await show_status(config, as_json=args.json)


async def _dlq(config: Config, args: argparse.Namespace) -> int:
    from sluice.cli.stream_commands import dlq

    return await dlq(config, args)


async def replay(config: Config, name: str, *, progress: bool) -> int:
    parts = assemble(config)
    projections = parts.apps.projections
    projection = projections.get(name)
    if projection is None:
        print(
            f"unknown projection {name!r}; known: {', '.join(sorted(projections))}", file=sys.stderr
        )
        return 2
    async with parts.open_resources() as resources:
        result = await rebuild(resources, projection, progress=progress)
    print(f"{result.projection}: rebuilt from {result.events} events, watermark {result.watermark}")
    return 0


async def tasks_command(config: Config, args: argparse.Namespace) -> int:
    from sluice.scheduler import runs
    from sluice.scheduler.loop import default_holder
    from sluice.scheduler.pauses import paused_tasks
    from sluice.scheduler.policy import describe
    from sluice.scheduler.runner import AlreadyRan, Busy, Runner

    parts = assemble(config)
    tasks = parts.tasks()
    async with parts.open_resources() as resources:
        if args.action == "list":
            now = utcnow()
            paused = await paused_tasks(resources.store)
            for task in tasks.values():
                last = await runs.newest(resources.store, task.name, 1)
                next_run = task.schedule.next_after(now)
                last_text = (
                    f"{last[0].status} (started {last[0].started_at:%Y-%m-%dT%H:%M:%SZ})"
                    if last
                    else "never"
                )
                next_text = f"{next_run:%Y-%m-%dT%H:%M:%SZ}" if next_run else "none"
                state = "  PAUSED" if task.name in paused else ""
                print(
                    f"{task.name:<22} {task.schedule.describe():<34}"
                    f" next {next_text}  last {last_text}  {describe(task.policy)}{state}"
                )
            return 0
        chosen = tasks.get(args.name)
        if chosen is None:
            print(f"unknown task {args.name!r}; known: {', '.join(tasks)}", file=sys.stderr)
            return 2
        runner = Runner(resources, holder=f"cli:{default_holder()}")
        try:
            run = await runner.begin(chosen, "manual", utcnow())
        except (Busy, AlreadyRan):
            print(f"{chosen.name}: a run is in progress; try again later", file=sys.stderr)
            return 3
        print(f"{chosen.name}: run {run.record.id} started (trace {run.record.trace_id})")
        record = await runner.execute(run)
    print(f"{chosen.name}: {record.status}" + (f": {record.error}" if record.error else ""))
    return 0 if record.status == "succeeded" else 1


# Long-running processes, and commands that do one thing and exit with a status.
_SERVICES: dict[str, Callable[[Config, argparse.Namespace], Awaitable[None]]] = {
    "api": _api,
    "relay": _relay,
    "scheduler": _scheduler,
    "worker": _worker,
}
_TOOLS: dict[str, Callable[[Config, argparse.Namespace], Awaitable[int]]] = {
    "replay": _replay,
    "status": _status,
    "flow": _flow,
    "dlq": _dlq,
    "tasks": tasks_command,
}
