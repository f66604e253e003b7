"""The data dir and the files sluice keeps there are its owner's only."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.security.secret_files import load_or_create_secret, make_private, write_private


@pytest.fixture
def umask() -> Iterator[None]:
    """Start from the common 022 and give the test process its umask back afterwards."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


@pytest.mark.usefixtures("umask")
def test_the_data_dir_is_created_0700_and_what_follows_is_private(tmp_path: Path) -> None:
    data = tmp_path / "deep" / "var"
    assert make_private(data) is False
    assert _mode(data) == 0o700
    (data / "later").mkdir()
    (data / "later" / "file").write_text("x")
    assert (_mode(data / "later"), _mode(data / "later" / "file")) == (0o700, 0o600)


@pytest.mark.usefixtures("umask")
def test_a_data_dir_open_to_others_is_narrowed(tmp_path: Path) -> None:
    data = tmp_path / "var"
    data.mkdir(mode=0o755)
    os.chmod(data, 0o755)
    assert make_private(data) is True
    assert _mode(data) == 0o700
    assert make_private(data) is False


@pytest.mark.usefixtures("umask")
def test_private_files_are_0600_whatever_the_umask(tmp_path: Path) -> None:
    os.umask(0)
    url = tmp_path / "redis" / "url"
    write_private(url, "redis://127.0.0.1:1/0\n")
    write_private(url, "redis://127.0.0.1:2/0\n")
    assert url.read_text() == "redis://127.0.0.1:2/0\n"
    secret, created = load_or_create_secret(tmp_path / "redis" / "password")
    assert created and secret
    assert sorted(p.name for p in (tmp_path / "redis").iterdir()) == ["password", "url"]
    for path in (tmp_path / "redis", url, tmp_path / "redis" / "password"):
        assert _mode(path) == (0o700 if path.is_dir() else 0o600)
