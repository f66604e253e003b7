"""The secret behind anonymous visitor hashes, and the hash itself."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets

from sluice.config import Config
from sluice.security.secret_files import read_secret
from sluice.store import Store
from sluice.store.secrets import shared_secret

# Where release 1 kept the key: a deployment that has one keeps using it.
KEY_FILE = "visitor.key"
SECRET = "visitor-key"


async def load_visitor_key(config: Config, store: Store) -> bytes:
    """``SLUICE_VISITOR_KEY``, else the key stored in the database (made once).

    Every replica, on every host, must hash a visitor the same way, or unique
    visitors would be counted once per host. A key left in the data dir by an
    earlier release becomes the stored one, so counts go on across the upgrade.
    """
    if config.visitor_key:
        return config.visitor_key.encode()
    earlier = await asyncio.to_thread(read_secret, config.data_dir / KEY_FILE)
    key = await shared_secret(store, SECRET, earlier or secrets.token_urlsafe(32))
    return key.encode()


def _visitor(ip: str, user_agent: str) -> bytes:
    """What is hashed. A header that is not UTF-8 reaches us with its bad bytes as
    surrogates (aiohttp decodes with ``surrogateescape``): hashed as the bytes sent."""
    return f"{ip}\n{user_agent}".encode(errors="surrogateescape")


def visitor_hash(key: bytes, ip: str, user_agent: str) -> str:
    """A keyed hash of IP and User-Agent: stable per visitor, the raw IP is never kept."""
    return hmac.new(key, _visitor(ip, user_agent), hashlib.sha256).hexdigest()


class VisitorHasher:
    """``visitor_hash`` with one key, the same digests at about half the cost.

    HMAC-SHA256 (RFC 2104) with the key's inner and outer hash states computed
    once: each hash then only copies them, where ``hmac.new`` derives them from
    the key again. It runs once per redirect.
    """

    def __init__(self, key: bytes) -> None:
        if len(key) > _BLOCK:
            key = hashlib.sha256(key).digest()
        key = key.ljust(_BLOCK, b"\0")
        self._inner = hashlib.sha256(bytes(b ^ 0x36 for b in key))
        self._outer = hashlib.sha256(bytes(b ^ 0x5C for b in key))

    def __call__(self, ip: str, user_agent: str) -> str:
        inner = self._inner.copy()
        inner.update(_visitor(ip, user_agent))
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.hexdigest()


_BLOCK = hashlib.sha256().block_size
