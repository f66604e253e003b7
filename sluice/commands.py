"""What each ``sluice`` command does, given a loaded config."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from sluice.config import Config
from sluice.errors import ConfigError
from sluice.groups import GROUPS, PROJECTIONS
from sluice.processes import run_all, run_api, run_relay, run_worker, stop_on_signals
from sluice.projections.replay import rebuild
from sluice.redis_server import RedisServer
from sluice.resources import open_resources
from sluice.secret_files import ADMIN_TOKEN_FILE, load_or_create_secret
from sluice.store import open_store
from sluice.streams.failures import Failures
from sluice.streams.maintenance import status
from sluice.streams.waiting import first_of


def _embedded_url_file(config: Config) -> Path:
    return config.data_dir / "redis" / "url"


def with_redis(config: Config) -> Config:
    """Use SLUICE_REDIS_URL, else the embedded Redis a running ``sluice up`` announced."""
    if config.redis_url:
        return config
    announced = _embedded_url_file(config)
    if announced.exists():
        return msgspec.structs.replace(config, redis_url=announced.read_text().strip())
    raise ConfigError("SLUICE_REDIS_URL is not set and no `sluice up` is running in this data dir")


def _ensure_admin_token(config: Config) -> Config:
    """Generate the admin token into the data dir once; print it only then."""
    if config.admin_token:
        return config
    path = config.data_dir / ADMIN_TOKEN_FILE
    token, created = load_or_create_secret(path)
    if created:
        print(f"admin token (shown once, kept in {path}, mode 0600): {token}", flush=True)
    else:
        print(f"admin token: kept in {path}", flush=True)
    return msgspec.structs.replace(config, admin_token=token)


async def up(config: Config) -> int:
    stop = stop_on_signals()
    config = _ensure_admin_token(config)
    server: RedisServer | None = None
    if not config.redis_url:
        server = RedisServer(config.data_dir / "redis")
        server.start()
        config = msgspec.structs.replace(config, redis_url=server.url)
        _embedded_url_file(config).write_text(server.url)
    try:
        listening = asyncio.Event()
        everything = asyncio.create_task(run_all(config, stop, listening))
        await first_of(listening, stop)
        if listening.is_set():
            print(f"sluice is up: {config.base_url}  (redis: {config.redis_url})", flush=True)
            print("press Ctrl-C to stop", flush=True)
        await everything
    finally:
        if server is not None:
            _embedded_url_file(config).unlink(missing_ok=True)
            server.stop()
    print("sluice stopped", flush=True)
    return 0


async def dispatch(config: Config, args: argparse.Namespace) -> int:
    command = args.command
    if command == "up":
        return await up(config)
    if command == "migrate":
        store = await open_store(config)
        await store.close()
        print("database is up to date")
        return 0
    config = with_redis(config)
    if command == "api":
        await run_api(config, stop_on_signals())
    elif command == "relay":
        await run_relay(config, stop_on_signals())
    elif command == "worker":
        await run_worker(config, args.groups, stop_on_signals(), args.consumer)
    elif command == "replay":
        return await replay(config, args.projection, progress=not args.no_progress)
    elif command == "status":
        return await show_status(config, as_json=args.json)
    elif command == "dlq":
        return await dlq(config, args)
    return 0


async def replay(config: Config, name: str, *, progress: bool) -> int:
    projection = PROJECTIONS.get(name)
    if projection is None:
        print(
            f"unknown projection {name!r}; known: {', '.join(sorted(PROJECTIONS))}", file=sys.stderr
        )
        return 2
    async with open_resources(config) as resources:
        result = await rebuild(resources, projection, progress=progress)
    print(f"{result.projection}: rebuilt from {result.events} events, watermark {result.watermark}")
    return 0


async def show_status(config: Config, *, as_json: bool) -> int:
    async with open_resources(config) as resources:
        report = await status(resources.redis, resources.keys, resources.store)
    if as_json:
        print(json.dumps(dataclasses.asdict(report), indent=2))
        return 0
    print(f"relay backlog: {report.relay_backlog}   delayed retries: {report.delayed}")
    for stream in report.streams:
        print(f"{stream.stream}  length={stream.length}")
        for g in stream.groups:
            lag = "?" if g.lag is None else g.lag
            print(
                f"  {g.group:<16} consumers={g.consumers} pending={g.pending}"
                f" lag={lag} dead_letters={g.dead_letters}"
            )
    return 0


async def dlq(config: Config, args: argparse.Namespace) -> int:
    async with open_resources(config) as resources:
        if args.action == "list":
            groups = [args.group] if args.group else sorted(GROUPS)
            for group in groups:
                entries: Any = await resources.redis.xrange(
                    resources.keys.dead(group), count=args.limit
                )
                for entry_id, fields in entries:
                    f = {k.decode(): v.decode("utf-8", "replace") for k, v in fields.items()}
                    print(
                        f"{group}  {entry_id.decode()}  {f.get('type')}  {f.get('event_id')}"
                        f"  deliveries={f.get('deliveries')}  {f.get('error')}"
                    )
            return 0
        failures = Failures(resources.redis, resources.keys, args.group)
        done = (
            await failures.redrive(args.id) is not None
            if args.action == "redrive"
            else await failures.drop(args.id)
        )
    print(f"{args.action}: {'done' if done else 'no such dead letter'}")
    return 0 if done else 1
