"""Without SLUICE_VISITOR_KEY the key of visitor hashes is made once and kept in the
database, so processes on every host (data dirs of their own) hash a visitor alike."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from sluice.app.assembly import create_app, open_store
from sluice.builtin.articles.events import ArticleViewed
from sluice.config import Config
from sluice.http.app_keys import STORE
from sluice.http.visitors import KEY_FILE, load_visitor_key
from sluice.store import Store
from sluice.store.secrets import read_secret
from tests.api.helpers import AiohttpClient, stored_events


@pytest.fixture
async def store(make_config: Callable[..., Config]) -> AsyncIterator[Store]:
    opened = await open_store(make_config())
    try:
        yield opened
    finally:
        await opened.close()


async def test_the_key_is_made_once_and_kept_in_the_database(
    make_config: Callable[..., Config], store: Store, tmp_path: Path
) -> None:
    key = await load_visitor_key(make_config(visitor_key=""), store)
    assert len(key) >= 32
    assert await read_secret(store, "visitor-key") == key.decode()
    # Another host: another data dir, the same database, the same key.
    other = make_config(visitor_key="", data_dir=tmp_path / "other-host")
    assert await load_visitor_key(other, store) == key
    assert not (tmp_path / "other-host" / KEY_FILE).exists()


async def test_a_key_an_earlier_release_left_in_the_data_dir_is_kept(
    make_config: Callable[..., Config], store: Store
) -> None:
    """Unique visitors go on counting the same visitors across the upgrade."""
    config = make_config(visitor_key="")
    config.data_dir.mkdir(parents=True, exist_ok=True)
    (config.data_dir / KEY_FILE).write_text("key-of-release-one\n")
    assert await load_visitor_key(config, store) == b"key-of-release-one"
    assert await read_secret(store, "visitor-key") == "key-of-release-one"


async def test_a_configured_key_wins(make_config: Callable[..., Config], store: Store) -> None:
    assert await load_visitor_key(make_config(visitor_key="configured"), store) == b"configured"
    assert await read_secret(store, "visitor-key") is None


async def test_the_app_hashes_visitors_with_the_stored_key(
    aiohttp_client: AiohttpClient, make_config: Callable[..., Config]
) -> None:
    config = make_config(visitor_key="")
    client = await aiohttp_client(create_app(config))
    response = await client.post("/v1/articles/a1/views", headers={"User-Agent": "ua"})
    assert response.status == 202
    assert client.app is not None
    stored = await read_secret(client.app[STORE], "visitor-key")
    assert stored is not None
    [(event, _)] = await stored_events(client.app[STORE])
    assert isinstance(event, ArticleViewed)
    assert event.viewer == hmac.new(stored.encode(), b"127.0.0.1\nua", hashlib.sha256).hexdigest()
