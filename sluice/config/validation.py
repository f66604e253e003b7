"""The checks a loaded ``Config`` must pass: each refusal names the ``SLUICE_*`` setting."""

from __future__ import annotations

from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sluice.config import database_url as urls
from sluice.config.networks import cluster_nodes, trusted_networks
from sluice.errors import ConfigError

if TYPE_CHECKING:
    from sluice.config import Config

MAX_PARTITIONS = 1024

# What a run of a task does when the previous one still runs (sluice/scheduler/overlap.py).
TASK_OVERLAPS = ("skip", "buffer_one", "cancel_other", "allow_all")

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def printable_ascii(text: str) -> bool:
    """What a token must be to travel in a header (and to be hashed): printable ASCII."""
    return text.isascii() and text.isprintable()


def validate(config: Config) -> None:
    try:
        ZoneInfo(config.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"SLUICE_TIMEZONE {config.timezone!r} is not an IANA time zone") from None
    positive = (
        "max_deliveries",
        "relay_batch",
        "worker_batch",
        "job_group_backlog",
        "job_priority_aging_seconds",
        "projection_batch",
        "worker_concurrency",
        "database_pool",
        "max_connections",
        "password_hash_concurrency",
        "client_limit_window_seconds",
        "logins_per_client",
        "registrations_per_client",
        "admin_failures_per_client",
        "history_hot_days",
        "history_segment_events",
        "api_processes",
        "connections_per_address",
    )
    for name in positive:
        if getattr(config, name) < 1:
            raise ConfigError(f"SLUICE_{name.upper()} must be at least 1")
    _validate_history(config)
    _validate_redis(config)
    zero = {"password_hash_queue": "no queue", "password_hash_per_claimant": "no cap"}
    for name, meaning in zero.items():
        if getattr(config, name) < 0:
            raise ConfigError(f"SLUICE_{name.upper()} must be 0 ({meaning}) or more")
    _validate_logs(config)
    _validate_admin_token(config.admin_token)
    for name in (
        "header_timeout_seconds",
        "body_timeout_seconds",
        "keepalive_timeout_seconds",
        "handler_timeout_seconds",
        "stall_seconds",
        "delivery_retention",
        "password_hash_wait_seconds",
        "write_timeout_seconds",
    ):
        if not getattr(config, name) > 0:
            raise ConfigError(f"SLUICE_{name.upper()} must be more than 0")
    for group, seconds in config.group_timeouts.items():
        if not seconds > 0:
            env_name = group.upper().replace("-", "_")
            raise ConfigError(f"SLUICE_{env_name}_TIMEOUT_SECONDS must be more than 0")
    _validate_overlaps(config)
    snapshot_intervals(config.snapshot_every)
    trusted_networks(config.trusted_proxies)
    urls.check(config.database_url)


def snapshot_intervals(text: str) -> dict[str, int]:
    """``SLUICE_SNAPSHOT_EVERY`` (``orders=50,carts=0``) by aggregate type; whether each
    type is declared is checked where the apps are loaded (``sluice.app.assembly``)."""
    found: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, equals, raw = (s.strip() for s in item.partition("="))
        if not (name and equals and raw.isdigit() and raw.isascii()) or name in found:
            raise ConfigError(
                "SLUICE_SNAPSHOT_EVERY must be comma-separated TYPE=EVENTS (0 or more, each"
                f" aggregate type once), such as orders=50,carts=0; got {text!r}"
            )
        found[name] = int(raw)
    return found


def _validate_overlaps(config: Config) -> None:
    for task, overlap in config.task_overlaps.items():
        if overlap not in TASK_OVERLAPS:
            env_name = task.upper().replace("-", "_")
            raise ConfigError(
                f"SLUICE_{env_name}_OVERLAP must be one of {' | '.join(TASK_OVERLAPS)},"
                f" got {overlap!r}"
            )


def _validate_logs(config: Config) -> None:
    if config.log_format not in ("json", "console"):
        raise ConfigError("SLUICE_LOG_FORMAT must be json or console")
    if config.log_level.lower() not in LOG_LEVELS:
        raise ConfigError(f"SLUICE_LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}")
    if config.redirect_log not in ("errors", "all"):
        raise ConfigError("SLUICE_REDIRECT_LOG must be errors or all")


ADMIN_TOKEN_MIN = 32


def _validate_redis(config: Config) -> None:
    if not 0 <= config.stream_partitions <= MAX_PARTITIONS:
        raise ConfigError(
            f"SLUICE_STREAM_PARTITIONS must be from 1 to {MAX_PARTITIONS} (0: the default)"
        )
    cluster_nodes(config.redis_cluster_nodes)


def _validate_history(config: Config) -> None:
    # The relay's reconcile reads the events a stream may still hold from the table only.
    if config.history_hot_days * 86_400 < config.stream_retention:
        raise ConfigError(
            "SLUICE_HISTORY_HOT_DAYS must cover SLUICE_STREAM_RETENTION: events a stream"
            " may still hold stay in the events table"
        )


def _validate_admin_token(token: str | None) -> None:
    if token is None:
        return
    if not (printable_ascii(token) and token == token.strip()):
        raise ConfigError(
            "SLUICE_ADMIN_TOKEN must be printable ASCII without surrounding spaces"
            " (it travels in a header)"
        )
    if len(token) < ADMIN_TOKEN_MIN:
        # Guessable; `sluice up` generates 43 characters (256 bits) when none is set.
        raise ConfigError(
            f"SLUICE_ADMIN_TOKEN must be at least {ADMIN_TOKEN_MIN} characters, got {len(token)};"
            " unset it to have `sluice up` generate one, or use `openssl rand -base64 32`"
        )
