"""Signed links in mails: what makes a verification or unsubscribe token genuine."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from sluice.builtin.accounts.mail.links import (
    BadLink,
    check_unsubscribe_token,
    link,
    parse_verify_token,
    unsubscribe_token,
    verify_token,
)

KEY = b"k" * 32
USER = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
AT = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def test_a_verification_token_names_its_user_and_expiry_and_is_signed_for_the_address() -> None:
    token = verify_token(KEY, USER, "Ada@Example.org", AT)
    parsed = parse_verify_token(token)
    assert (parsed.user_id, parsed.expires_at) == (USER, AT)
    assert parsed.signed_for(KEY, "ada@example.ORG")  # addresses compare case-insensitively
    assert not parsed.signed_for(KEY, "eve@example.org")
    assert not parsed.signed_for(b"another key", "ada@example.org")
    assert not parsed.expired(AT - timedelta(seconds=1))
    assert parsed.expired(AT)


def test_changing_any_part_of_a_verification_token_breaks_its_signature() -> None:
    token = verify_token(KEY, USER, "ada@example.org", AT)
    version, user, expiry, mac = token.split(".")
    later = str(int(expiry) + 86_400)
    other_user = USER.replace("0190", "0191")
    flipped = mac[:-1] + ("A" if mac[-1] != "A" else "B")
    for forged in (
        f"{version}.{user}.{later}.{mac}",
        f"{version}.{other_user}.{expiry}.{mac}",
        f"{version}.{user}.{expiry}.{flipped}",
    ):
        assert not parse_verify_token(forged).signed_for(KEY, "ada@example.org")


@pytest.mark.parametrize(
    "token",
    [
        "",
        "v1",
        "v1.u.1",
        "v2.u.1." + "a" * 43,
        "v1.u.1." + "a" * 42,
        "v1.u.99999999999." + "a" * 43,
        "v1.u/../x.1." + "a" * 43,
        "v1.u.1." + "a" * 43 + "\n",
    ],
)
def test_what_is_not_shaped_like_a_verification_token_is_refused(token: str) -> None:
    with pytest.raises(BadLink):
        parse_verify_token(token)


def test_an_unsubscribe_token_names_its_reminder_and_never_passes_for_another_kind() -> None:
    token = unsubscribe_token(KEY, "r1")
    assert check_unsubscribe_token(KEY, token) == "r1"
    with pytest.raises(BadLink):
        check_unsubscribe_token(b"another key", token)
    with pytest.raises(BadLink):
        check_unsubscribe_token(KEY, token.replace("u1.r1.", "u1.r2."))
    with pytest.raises(BadLink):  # a verification token's parts, signed for "verify"
        check_unsubscribe_token(KEY, verify_token(KEY, "r1", "a@example.org", AT))
    with pytest.raises(BadLink):
        parse_verify_token(token)


def test_links_put_the_token_in_the_query() -> None:
    assert link("https://sl.example/", "/v1/verify", "v1.a.1.b") == (
        "https://sl.example/v1/verify?token=v1.a.1.b"
    )
