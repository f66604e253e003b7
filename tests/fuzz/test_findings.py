"""What the fuzz run found, pinned as plain tests (its draws may not hit them again)."""

from __future__ import annotations

import pytest
import requests

from tests.fuzz.helpers import Seed

pytestmark = pytest.mark.fuzz


def test_a_view_with_a_bad_token_is_a_documented_401(served: Seed) -> None:
    answer = requests.post(
        f"{served.base_url}/v1/articles/a1/views",
        timeout=30,
        headers={"Authorization": "Bearer not-a-token"},
    )
    assert answer.status_code == 401
    assert answer.headers["Content-Type"] == "application/problem+json"
    document = requests.get(f"{served.base_url}/openapi.json", timeout=30).json()
    operation = document["paths"]["/v1/articles/{article_id}/views"]["post"]
    assert "401" in operation["responses"]
    assert {} in operation["security"]  # the token stays optional


@pytest.mark.parametrize("viewer", ["", "v" * 257])
def test_a_bad_viewer_is_refused_with_a_token_too(served: Seed, viewer: str) -> None:
    """The token decides who the viewer is, but an invalid body stays invalid (422)."""
    answer = requests.post(
        f"{served.base_url}/v1/articles/a1/views",
        timeout=30,
        json={"viewer": viewer},
        headers={"Authorization": f"Bearer {served.user_token}"},
    )
    assert answer.status_code == 422
    assert answer.json()["errors"][0]["field"] == "viewer"


@pytest.mark.parametrize(
    ("path", "operation"),
    [
        ("/v1/tokens", "/v1/tokens"),
        ("/v1/users", "/v1/users"),
        ("/v1/articles/a1/views", "/v1/articles/{article_id}/views"),
    ],
)
def test_a_field_nested_a_thousand_deep_is_a_documented_400(
    served: Seed, path: str, operation: str
) -> None:
    """Guarantee 7: msgspec's RecursionError on an ignored field answered 500."""
    depth = 1000
    body = b'{"email": "deep@example.org", "password": "fuzz-password-1", "x": '
    body += b"[" * depth + b"]" * depth + b"}"
    answer = requests.post(
        f"{served.base_url}{path}",
        data=body,
        timeout=30,
        headers={"Content-Type": "application/json"},
    )
    assert answer.status_code == 400
    assert answer.headers["Content-Type"] == "application/problem+json"
    document = requests.get(f"{served.base_url}/openapi.json", timeout=30).json()
    assert "400" in document["paths"][operation]["post"]["responses"]
