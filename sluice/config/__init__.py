"""Typed configuration, read once from ``SLUICE_*`` environment variables."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TypeVar
from zoneinfo import ZoneInfo

import msgspec

from sluice.config import database_url as urls
from sluice.config.networks import cluster_nodes
from sluice.config.validation import snapshot_intervals, validate
from sluice.errors import ConfigError


class AppValues:
    """The ``SLUICE_*`` values that no field of ``Config`` reads, by name (lower case,
    without the prefix): the apps' own settings, as written (text) or as a test gave them.
    Each app's settings are read from them once (``sluice.app.settings``) and kept here."""

    __slots__ = ("given", "parsed", "values")

    def __init__(self, values: Mapping[str, object], given: Iterable[str] = ()) -> None:
        self.values: Mapping[str, object] = dict(values)
        # The names given to load_config by keyword (not read from the environment): a
        # name no loaded app declares is a mistake the apps' loading refuses.
        self.given = frozenset(given)
        self.parsed: dict[type, object] = {}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AppValues) and self.values == other.values

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"AppValues({dict(self.values)!r})"


class Config(msgspec.Struct, frozen=True, kw_only=True):
    """The deployment's settings, read once from the ``SLUICE_*`` environment variables
    (each field is the variable's name without the prefix, in lower case)."""

    redis_url: str | None = None
    # host:port[,host:port...]: seed nodes of a Redis Cluster, used instead of redis_url.
    redis_cluster_nodes: str = ""
    # The cluster nodes' password (AUTH); SLUICE_REDIS_URL carries its own.
    redis_password: str | None = None
    # Streams per aggregate type; 0: the default of the mode (1 on one Redis, 16 on a cluster).
    stream_partitions: int = 0
    data_dir: Path = Path("./var")
    database_url: str = ""
    # Connections each process may hold (PostgreSQL).
    database_pool: int = 10
    host: str = "127.0.0.1"
    port: int = 8080
    base_url: str = ""
    admin_token: str | None = None
    timezone: str = "UTC"
    claim_idle_ms: int = 60_000
    retry_base_ms: int = 2_000
    max_deliveries: int = 5
    # Operations (docs/guides/operate.md): deliveries are kept this many seconds; an attempt is
    # cancelled and fails past its group's deadline (SLUICE_<GROUP>_TIMEOUT_SECONDS, in
    # ``group_timeouts``, else SLUICE_HANDLER_TIMEOUT_SECONDS); a consumer holding
    # entries that acked none for SLUICE_STALL_SECONDS is flagged stalled.
    delivery_retention: int = 7 * 86_400
    purge_deliveries_cron: str = "0 41 * * * *"
    purge_deliveries_timezone: str = "UTC"
    handler_timeout_seconds: float = 300.0
    group_timeouts: dict[str, float] = msgspec.field(default_factory=dict)
    # Scheduling policies (docs/guides/tasks.md), by task name: SLUICE_<TASK>_OVERLAP,
    # _CATCHUP_SECONDS, _JITTER_SECONDS (sluice/scheduler/policy.py); a task's timeout is its entry
    # in ``group_timeouts`` (the same SLUICE_<NAME>_TIMEOUT_SECONDS words).
    # Flow control's limits by group name, as written (SLUICE_<GROUP>_KEY_CONCURRENCY,
    # _KEY_RATE, _RATE): a flow group's worker checks its own as it starts (sluice.flow.spec).
    group_key_concurrency: dict[str, str] = msgspec.field(default_factory=dict)
    group_key_rates: dict[str, str] = msgspec.field(default_factory=dict)
    group_rates: dict[str, str] = msgspec.field(default_factory=dict)
    task_overlaps: dict[str, str] = msgspec.field(default_factory=dict)
    task_catchup_seconds: dict[str, float] = msgspec.field(default_factory=dict)
    task_jitter_seconds: dict[str, float] = msgspec.field(default_factory=dict)
    stall_seconds: int = 60
    stream_prefix: str = "sluice"
    stream_retention: int = 86_400
    log_format: str = "json"
    log_level: str = "info"
    # A redirect that records a visit writes no request line unless "all"
    # (docs/design/redirects.md).
    redirect_log: str = "errors"
    # API processes serving one port (``sluice api --processes``).
    api_processes: int = 1
    # Not in the spec's table; tuning knobs with safe defaults.
    relay_batch: int = 2_000
    relay_poll_ms: int = 1_000
    worker_batch: int = 100
    # Projection groups read bigger batches: their cost is mostly per batch (one
    # transaction, its round trips, the hot counters written once per batch). 1,000
    # against 500: +9 % end to end on PostgreSQL, +5 % on SQLite (bench/README.md,
    # peers.py, "a projection batch of 1,000").
    projection_batch: int = 1_000
    worker_concurrency: int = 16
    worker_block_ms: int = 2_000
    visitor_key: str = ""
    # Delayed jobs (docs/concepts/job-flow.md): a due job waiting to be fired rises one
    # priority level per this many seconds; a job group is given at most this many fired
    # jobs it has not run yet, the rest wait in the table, in priority order.
    job_priority_aging_seconds: float = 60.0
    job_group_backlog: int = 100
    # Scheduler: a run's lock lives this long unless its watchdog renews it (every third).
    task_lock_ttl_ms: int = 30_000
    # Built-in tasks: six-field cron and an IANA zone each ("" zone: SLUICE_TIMEZONE).
    trim_streams_cron: str = "0 */10 * * * *"
    trim_streams_timezone: str = "UTC"
    reap_consumers_cron: str = "0 */30 * * * *"
    reap_consumers_timezone: str = "UTC"
    purge_expired_cron: str = "0 15 3 * * *"
    purge_expired_timezone: str = "UTC"
    archive_history_cron: str = "0 17 * * * *"
    archive_history_timezone: str = "UTC"
    # Events younger than this many days stay in the events table; older ones the relay
    # has published are moved into archive segments by the archive-history task.
    history_hot_days: int = 7
    # Events per archive segment, at most; a segment is made only from a tenth of this
    # or more (each hourly run would otherwise write small, poorly compressed ones).
    history_segment_events: int = 100_000
    # Events between two snapshots of an event-sourced aggregate, by aggregate type
    # ("orders=50,carts=0"; 0: none), over the Aggregate classes' own snapshot_every.
    snapshot_every: str = ""
    # Deprecated (declare tasks with @app.task): more tasks, comma-separated
    # "module:callable", each callable(config) -> iterable of Task.
    extra_tasks: str = ""
    # The apps this deployment runs (sluice.app.loading): comma-separated names of
    # built-in or installed apps and import paths; "" is "default", all of them.
    apps: str = ""
    # Abuse limits (docs/guides/security.md). Per API process: request head and body deadlines, idle
    # keep-alive, open connections, password hashes at once.
    header_timeout_seconds: float = 10.0
    body_timeout_seconds: float = 30.0
    keepalive_timeout_seconds: float = 75.0
    max_connections: int = 1_000
    # Of those, what one client address holds (IPv6 by /64; a proxy is one address), and
    # how long an answer may wait unread (writing paused) before its connection is closed.
    connections_per_address: int = 100
    write_timeout_seconds: float = 30.0
    password_hash_concurrency: int = 8
    # Password hashes beyond the concurrency wait for a slot, at most this many (0: none
    # waits) and each at most this many seconds; beyond either, 503 with Retry-After.
    password_hash_queue: int = 64
    password_hash_wait_seconds: float = 2.0
    # Password hashes one claimant (an account; a client address for logins, sign-ups
    # and unlocking password links) may have running or waiting at once (0: no cap);
    # beyond it, 429 with Retry-After for that claimant only.
    password_hash_per_claimant: int = 2
    # Per client address, shared by every replica: comma-separated CIDRs whose forwarded
    # headers are believed, and how many logins, registrations and failed admin
    # authentications one address gets per window.
    trusted_proxies: str = ""
    client_limit_window_seconds: int = 900
    logins_per_client: int = 100
    registrations_per_client: int = 20
    admin_failures_per_client: int = 10
    # The apps' own settings (``App(settings=...)``, sluice/app/settings.py): every other
    # SLUICE_* variable, by its name without the prefix in lower case, read and checked
    # by the apps that declare them when they are loaded.
    app_values: AppValues = msgspec.field(default_factory=lambda: AppValues({}))

    @property
    def sqlite_path(self) -> Path:
        """The SQLite file of ``database_url`` (on the SQLite store)."""
        return urls.sqlite_path(self.database_url)

    @property
    def postgres(self) -> bool:
        """Whether the store is PostgreSQL."""
        return urls.is_postgres(self.database_url)

    @property
    def cluster(self) -> bool:
        """Whether Redis is a Redis Cluster (``SLUICE_REDIS_CLUSTER_NODES`` is set)."""
        return bool(self.redis_cluster_nodes)

    @property
    def partitions(self) -> int:
        """``SLUICE_STREAM_PARTITIONS``, or the mode's default."""
        if self.stream_partitions:
            return self.stream_partitions
        return CLUSTER_PARTITIONS if self.cluster else 1

    @property
    def cluster_seeds(self) -> list[tuple[str, int]]:
        """The cluster's seed nodes as ``(host, port)`` pairs."""
        return cluster_nodes(self.redis_cluster_nodes)

    @property
    def snapshot_intervals(self) -> dict[str, int]:
        """``SLUICE_SNAPSHOT_EVERY`` by aggregate type."""
        return snapshot_intervals(self.snapshot_every)

    @property
    def zone(self) -> ZoneInfo:
        """``SLUICE_TIMEZONE`` as a time zone."""
        return ZoneInfo(self.timezone)

    def handler_timeout(self, group: str) -> float:
        """The deadline of one attempt of ``group``'s handler, in seconds."""
        return self.group_timeouts.get(group, self.handler_timeout_seconds)


# Partitions on a cluster unless SLUICE_STREAM_PARTITIONS says otherwise: enough to
# spread over up to 16 primaries, few enough that a worker's blocking reads (a
# connection per group and partition) stay in the dozens.
CLUSTER_PARTITIONS = 16

# Read from the environment as the fields' types say.
_INT_FIELDS = frozenset(f.name for f in msgspec.structs.fields(Config) if f.type is int)
_FIELDS = frozenset(Config.__struct_fields__) - {"app_values"}
_FLOAT_FIELDS = frozenset(f.name for f in msgspec.structs.fields(Config) if f.type is float)


def _convert(name: str, raw: str) -> object:
    if name in _INT_FIELDS:
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(f"SLUICE_{name.upper()} must be an integer, got {raw!r}") from None
    if name in _FLOAT_FIELDS:
        try:
            return float(raw)
        except ValueError:
            raise ConfigError(f"SLUICE_{name.upper()} must be a number, got {raw!r}") from None
    if name == "data_dir":
        return Path(raw)
    return raw


def load_config(environ: Mapping[str, str] | None = None, **overrides: object) -> Config:
    """Build the config from ``environ`` (``os.environ`` by default); tests pass a dict."""
    env = os.environ if environ is None else environ
    values, others = _read(env, overrides)
    # An app's setting given as an override reads as its variable would (a name ending in
    # _TIMEOUT_SECONDS is also a group's word, as it was when the app's setting was here).
    named = {**env, **{f"SLUICE_{name.upper()}": str(value) for name, value in others.items()}}
    for name, found in (
        ("group_timeouts", _group_timeouts(named)),
        ("group_key_concurrency", _by_name(named, "KEY_CONCURRENCY", str)),
        ("group_key_rates", _by_name(named, "KEY_RATE", str)),
        ("group_rates", _group_rates(named)),
        ("task_overlaps", _by_name(named, "OVERLAP", str)),
        ("task_catchup_seconds", _by_name(named, "CATCHUP_SECONDS", _seconds)),
        ("task_jitter_seconds", _by_name(named, "JITTER_SECONDS", _seconds)),
    ):
        values[name] = {**found, **values.get(name, {})}  # type: ignore[dict-item]
    values["app_values"] = AppValues(others, (name for name in overrides if name in others))
    values.setdefault("log_format", "console" if sys.stderr.isatty() else "json")
    config = Config(**values)  # type: ignore[arg-type]
    data_dir = Path(config.data_dir).resolve()
    derived: dict[str, object] = {"data_dir": data_dir}
    if not config.database_url:
        derived["database_url"] = f"sqlite:///{data_dir / 'sluice.db'}"
    if not config.base_url:
        derived["base_url"] = f"http://{config.host}:{config.port}"
    config = msgspec.structs.replace(config, **derived)
    validate(config)
    return config


def _read(
    env: Mapping[str, str], overrides: Mapping[str, object]
) -> tuple[dict[str, object], dict[str, object]]:
    """The fields of ``Config`` set by ``env`` and ``overrides``, and every other
    ``SLUICE_*`` value (the apps' settings)."""
    values: dict[str, object] = {}
    others: dict[str, object] = {}
    for key, raw in env.items():
        if not key.startswith("SLUICE_") or raw == "":
            continue
        name = key.removeprefix("SLUICE_").lower()
        if name in _FIELDS:
            values[name] = _convert(name, raw)
        elif name != "app_values":
            others[name] = raw
    for name, value in overrides.items():
        if name in _FIELDS:
            values[name] = value
        elif value is not None:
            others[name] = value
    return values, others


def _group_timeouts(env: Mapping[str, str]) -> dict[str, float]:
    """``SLUICE_<GROUP>_TIMEOUT_SECONDS`` by group name (``ARTICLE_VIEWS``: article-views);
    the config's own ``*_TIMEOUT_SECONDS`` settings are not groups."""
    return _by_name(env, "TIMEOUT_SECONDS", float, "a number of seconds")


def _group_rates(env: Mapping[str, str]) -> dict[str, str]:
    """``SLUICE_<GROUP>_RATE`` by group name, not the ``SLUICE_<GROUP>_KEY_RATE`` ones."""
    found = _by_name(env, "RATE", str)
    return {name: raw for name, raw in found.items() if not name.endswith("-key")}


T = TypeVar("T")


def _seconds(raw: str) -> float:
    seconds = float(raw)
    if not seconds >= 0 or seconds == float("inf"):
        raise ValueError(raw)
    return seconds


def _by_name(
    env: Mapping[str, str],
    suffix: str,
    parse: Callable[[str], T],
    expected: str = "a number of seconds, 0 or more",
) -> dict[str, T]:
    """``SLUICE_<NAME>_<SUFFIX>`` by name (``REFILL_CODE_POOL``: refill-code-pool; the
    config's own ``*_<SUFFIX>`` settings are not names); a value ``parse`` refuses is a
    configuration error saying it must be ``expected``."""
    pattern = re.compile(rf"SLUICE_([A-Z0-9_]+)_{suffix}")
    found: dict[str, T] = {}
    for key, raw in env.items():
        match = pattern.fullmatch(key)
        if match is None or raw == "" or f"{match[1].lower()}_{suffix.lower()}" in _FIELDS:
            continue
        try:
            found[match[1].lower().replace("_", "-")] = parse(raw.strip())
        except ValueError:
            raise ConfigError(f"{key} must be {expected}, got {raw!r}") from None
    return found
