"""What the fuzz run found, pinned as plain tests (its draws may not hit them again)."""

from __future__ import annotations

import pytest
import requests

from tests.fuzz.conftest import Seed

pytestmark = pytest.mark.fuzz


def test_a_view_with_a_bad_token_is_a_documented_401(served: Seed) -> None:
    answer = requests.post(f"{served.base_url}/v1/articles/a1/views", timeout=30,
                           headers={"Authorization": "Bearer not-a-token"})  # fmt: skip
    assert answer.status_code == 401
    assert answer.headers["Content-Type"] == "application/problem+json"
    document = requests.get(f"{served.base_url}/openapi.json", timeout=30).json()
    operation = document["paths"]["/v1/articles/{article_id}/views"]["post"]
    assert "401" in operation["responses"]
    assert {} in operation["security"]  # the token stays optional


@pytest.mark.parametrize("viewer", ["", "v" * 257])
def test_a_bad_viewer_is_refused_with_a_token_too(served: Seed, viewer: str) -> None:
    """The token decides who the viewer is, but an invalid body stays invalid (422)."""
    answer = requests.post(f"{served.base_url}/v1/articles/a1/views", timeout=30,
                           json={"viewer": viewer},
                           headers={"Authorization": f"Bearer {served.user_token}"})  # fmt: skip
    assert answer.status_code == 422
    assert answer.json()["errors"][0]["field"] == "viewer"
