"""The admin token: ``SLUICE_ADMIN_TOKEN``, else the one ``sluice up`` generated.

A generated token is kept in the data dir of ``sluice up`` (for the user to
read) and its SHA-256 in the database (table ``secrets``), so an API on any
other host accepts it without sharing a disk. Only hashes are compared, in
constant time. While no token is known, the database is asked again at most
every ``RECHECK`` seconds: an API started before ``sluice up`` generated it
picks it up.
"""

from __future__ import annotations

import hashlib
import hmac
import time

from sluice.store import Store
from sluice.store.secrets import read_secret, set_secret

SECRET = "admin-token-sha256"
RECHECK = 5.0


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class AdminToken:
    def __init__(self, configured: str | None, store: Store) -> None:
        self._digest = None if configured is None else _digest(configured)
        self._configured = configured is not None
        self._store = store
        self._checked = -RECHECK

    async def matches(self, token: str) -> bool:
        """Whether ``token`` is the admin token; False while there is none."""
        if self._digest is None and time.monotonic() - self._checked >= RECHECK:
            self._checked = time.monotonic()
            self._digest = await read_secret(self._store, SECRET)
        return self._digest is not None and hmac.compare_digest(_digest(token), self._digest)


async def record_generated(store: Store, token: str) -> None:
    """Make a token ``sluice up`` generated known to every host (its hash, not the token)."""
    await set_secret(store, SECRET, _digest(token))
