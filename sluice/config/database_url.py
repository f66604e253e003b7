"""What ``SLUICE_DATABASE_URL`` names: an SQLite file or a PostgreSQL database (read by the
config, before anything of the store is imported)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from sluice.errors import ConfigError

SQLITE_PREFIX = "sqlite:///"
POSTGRES_SCHEMES = ("postgresql", "postgres")


def is_postgres(url: str) -> bool:
    return url.split("://", 1)[0] in POSTGRES_SCHEMES


def sqlite_path(url: str) -> Path:
    if not url.startswith(SQLITE_PREFIX):
        raise ConfigError(f"not an SQLite URL: {redacted(url)!r}")
    return Path(url[len(SQLITE_PREFIX) :])


def check(url: str) -> None:
    """Raise ``ConfigError`` unless ``url`` names a store sluice can open."""
    if is_postgres(url):
        parts = urlsplit(url)
        if not (parts.hostname or "host=" in parts.query):
            raise ConfigError(f"SLUICE_DATABASE_URL {redacted(url)!r} names no host")
        return
    if not url.startswith(SQLITE_PREFIX):
        raise ConfigError(
            f"unsupported SLUICE_DATABASE_URL {redacted(url)!r}:"
            " expected sqlite:///PATH or postgresql://user:password@host:port/db"
        )


def redacted(url: str) -> str:
    """``url`` without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()
