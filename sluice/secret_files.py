"""Secrets kept in the data dir: created once, atomically, readable by the owner only."""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

ADMIN_TOKEN_FILE = "admin.token"


def read_secret(path: Path) -> str | None:
    if not path.exists():
        return None
    value = path.read_text().strip()
    if not value:
        raise RuntimeError(f"{path} is empty; delete it to have a new secret generated")
    return value


def load_or_create_secret(path: Path, nbytes: int = 32) -> tuple[str, bool]:
    """The secret in ``path``, creating it (mode 0600) if missing; True when created here.

    Several processes may start at once on one data dir, so the file is written
    under a private name and hard-linked into place, which fails for all but one.
    """
    existing = read_secret(path)
    if existing is not None:
        return existing, False
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    created = False
    try:
        with os.fdopen(fd, "w") as file:
            file.write(secrets.token_urlsafe(nbytes) + "\n")
        with contextlib.suppress(FileExistsError):
            os.link(temp, path)
            created = True
    finally:
        temp.unlink()
    value = read_secret(path)
    assert value is not None
    return value, created
