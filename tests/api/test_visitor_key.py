"""Without SLUICE_VISITOR_KEY the app keeps a generated key in the data dir (mode 0600)."""

from __future__ import annotations

import hashlib
import hmac
import stat
from collections.abc import Callable

from sluice.config import Config
from sluice.events import ArticleViewed
from sluice.http import create_app
from sluice.http.keys import STORE
from sluice.http.visitors import load_visitor_key
from tests.api.conftest import AiohttpClient, stored_events


def test_the_key_is_created_once_with_mode_0600(make_config: Callable[..., Config]) -> None:
    config = make_config(visitor_key="")
    key = load_visitor_key(config)
    path = config.data_dir / "visitor.key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(key) >= 32
    assert load_visitor_key(config) == key
    assert [p.name for p in config.data_dir.iterdir()] == ["visitor.key"]


def test_a_configured_key_wins(make_config: Callable[..., Config]) -> None:
    config = make_config(visitor_key="configured")
    assert load_visitor_key(config) == b"configured"
    assert not (config.data_dir / "visitor.key").exists()


async def test_the_app_hashes_visitors_with_the_stored_key(
    aiohttp_client: AiohttpClient, make_config: Callable[..., Config]
) -> None:
    config = make_config(visitor_key="")
    client = await aiohttp_client(create_app(config))
    response = await client.post("/v1/articles/a1/views", headers={"User-Agent": "ua"})
    assert response.status == 202
    key = (config.data_dir / "visitor.key").read_text().strip().encode()
    assert client.app is not None
    [(event, _)] = await stored_events(client.app[STORE])
    assert isinstance(event, ArticleViewed)
    assert event.viewer == hmac.new(key, b"127.0.0.1\nua", hashlib.sha256).hexdigest()
