"""The secret behind anonymous visitor hashes, and the hash itself."""

from __future__ import annotations

import hashlib
import hmac

from sluice.config import Config
from sluice.secret_files import load_or_create_secret

KEY_FILE = "visitor.key"


def load_visitor_key(config: Config) -> bytes:
    """The configured key, else the one kept in ``<data_dir>/visitor.key`` (created once, 0600).

    Every replica on one data dir must hash a visitor the same way.
    """
    if config.visitor_key:
        return config.visitor_key.encode()
    key, _ = load_or_create_secret(config.data_dir / KEY_FILE)
    return key.encode()


def visitor_hash(key: bytes, ip: str, user_agent: str) -> str:
    """A keyed hash of IP and User-Agent: stable per visitor, the raw IP is never kept."""
    return hmac.new(key, f"{ip}\n{user_agent}".encode(), hashlib.sha256).hexdigest()
