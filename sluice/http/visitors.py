"""The secret behind anonymous visitor hashes, and the hash itself."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets

from sluice.config import Config

KEY_FILE = "visitor.key"


def load_visitor_key(config: Config) -> bytes:
    """The configured key, else the one kept in ``<data_dir>/visitor.key`` (created once, 0600).

    Every replica on one data dir must hash a visitor the same way, so the file
    is created atomically: written under a private name, then hard-linked into
    place, which fails if another process got there first.
    """
    if config.visitor_key:
        return config.visitor_key.encode()
    data_dir = config.data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / KEY_FILE
    if not path.exists():
        temp = data_dir / f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as file:
                file.write(secrets.token_hex(32) + "\n")
            with contextlib.suppress(FileExistsError):
                os.link(temp, path)
        finally:
            temp.unlink()
    key = path.read_text().strip()
    if not key:
        raise RuntimeError(f"{path} is empty; delete it to have a new key generated")
    return key.encode()


def visitor_hash(key: bytes, ip: str, user_agent: str) -> str:
    """A keyed hash of IP and User-Agent: stable per visitor, the raw IP is never kept."""
    return hmac.new(key, f"{ip}\n{user_agent}".encode(), hashlib.sha256).hexdigest()
