"""The data dir and the secrets kept there, readable by their owner only.

Everything under the data dir is private: the SQLite file holds password hashes
and token hashes, the mail files hold addresses and the links sent, and the admin token and the
embedded Redis's password sit beside them. The directory is 0700, and every
sluice process creates its files 0600 (directories 0700) through its umask, with
explicit modes where a file is made on purpose.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

ADMIN_TOKEN_FILE = "admin.token"
PRIVATE_UMASK = 0o077


def make_private(data_dir: Path) -> bool:
    """Create ``data_dir`` mode 0700 and have everything this process creates from now on
    readable by its owner only; True when an existing data dir open to others (one made
    by an earlier release) was narrowed to 0700."""
    os.umask(PRIVATE_UMASK)
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    found = data_dir.stat()
    if found.st_mode & 0o077 and found.st_uid == os.geteuid():
        os.chmod(data_dir, 0o700)
        return True
    return False


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
    temp = _private_file(path)
    created = False
    try:
        temp.write_text(secrets.token_urlsafe(nbytes) + "\n")
        with contextlib.suppress(FileExistsError):
            os.link(temp, path)
            created = True
    finally:
        temp.unlink()
    value = read_secret(path)
    assert value is not None
    return value, created


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` with ``text``, mode 0600; a reader sees the old or the new text."""
    temp = _private_file(path)
    try:
        temp.write_text(text)
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)


def _private_file(path: Path) -> Path:
    """A new empty file (mode 0600) beside ``path``, under a name no other process uses."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}"
    os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    return temp
