"""Mail texts, idempotency keys and the composed message: headers a mail client relies on."""

from __future__ import annotations

import email.policy
from datetime import UTC, datetime, timedelta, timezone

import pytest

from sluice.builtin.accounts.mail import templates
from sluice.builtin.accounts.mail.sending import (
    Outgoing,
    compose,
    message_id,
    reminder_key,
    welcome_key,
)
from sluice.errors import HandlerError

VERIFY = "https://sl.example/v1/verify?token=v1.u1.1.mac"
UNSUBSCRIBE = "https://sl.example/v1/unsubscribe?token=u1.r1.mac"


def test_welcome_greets_by_name_and_links_the_service() -> None:
    content = templates.welcome("Ada Lovelace", "https://sl.example/", VERIFY)
    assert content.subject == "Welcome to sluice"
    assert content.text.startswith("Hello Ada Lovelace,\n")
    assert "https://sl.example/\n" in content.text


def test_welcome_carries_the_verification_link_and_says_what_waits_for_it() -> None:
    # docs/guides/security.md: the wording matches what will be sent; nothing but confirmation links
    # reach an address nobody confirmed, and reminders only once it is confirmed.
    text = templates.welcome("Ada", "https://sl.example/", VERIFY).text
    assert f"\n  {VERIFY}\n" in text
    assert "valid for 7 days" in text
    assert "Reminders are mailed only once it is confirmed." in text
    assert "nothing but confirmation links" in text and "3 at most" in text
    assert "nothing else will be sent" not in text
    again = templates.verification("Ada", VERIFY)
    assert again.subject == "Confirm your address for sluice"
    assert f"\n  {VERIFY}\n" in again.text


def test_welcome_without_a_name_and_with_line_breaks_in_it() -> None:
    assert templates.welcome(None, "http://x", VERIFY).text.startswith("Hello,\n")
    assert templates.welcome("   ", "http://x", VERIFY).text.startswith("Hello,\n")
    sneaky = templates.welcome("Eve\r\nBcc: all@example.org", "http://x", VERIFY)
    assert sneaky.text.startswith("Hello Eve Bcc: all@example.org,\n")


def test_reminder_shows_the_text_and_the_time_in_the_reminder_zone() -> None:
    content = templates.reminder(
        "Water the plants\nand the garden",
        datetime(2025, 3, 1, 7, 30, tzinfo=UTC),
        "Asia/Shanghai",
        UNSUBSCRIBE,
    )
    assert content.subject == "Reminder: Water the plants and the garden"
    assert "Reminder for 2025-03-01 15:30 CST:" in content.text
    assert "Water the plants\nand the garden" in content.text
    assert f"To pause it now, no sign-in needed:\n\n  {UNSUBSCRIBE}\n" in content.text


def test_reminder_subject_is_one_short_line() -> None:
    content = templates.reminder("x" * 500, datetime(2025, 1, 1, tzinfo=UTC), "UTC", UNSUBSCRIBE)
    assert content.subject == "Reminder: " + "x" * 80


def test_keys_name_the_user_or_the_reminder_occurrence() -> None:
    assert welcome_key("0190a1b2-c3d4") == "welcome_0190a1b2-c3d4"
    at = datetime(2025, 3, 1, 15, 30, tzinfo=timezone(timedelta(hours=8)))
    assert reminder_key("r42", at) == "reminder_r42_20250301T073000Z"


@pytest.mark.parametrize("key", ["", "welcome_../../etc", "welcome_a b", "_x", "k" * 201])
def test_keys_that_are_not_safe_names_are_refused_permanently(key: str) -> None:
    with pytest.raises(HandlerError) as error:
        Outgoing(
            key=key, recipient="a@example.org", content=templates.welcome(None, "http://x", VERIFY)
        )
    assert error.value.permanent


def test_the_message_id_derives_from_the_key_and_the_sender_domain() -> None:
    assert (
        message_id("welcome_u1", "Sluice <hello@sluice.example>") == "<welcome_u1@sluice.example>"
    )
    assert message_id("welcome_u1", "sluice") == "<welcome_u1@localhost>"


def test_compose_sets_the_headers_once_and_keeps_the_name_on_one_line() -> None:
    outgoing = Outgoing(
        key="welcome_u1",
        recipient="ada@example.org",
        recipient_name="Ada\nBcc: x@evil.example",
        content=templates.welcome("Ada", "http://x", VERIFY),
    )
    message = compose(outgoing, "Sluice <hello@sluice.example>")
    assert message["To"] == '"Ada Bcc: x@evil.example" <ada@example.org>'
    assert message["Bcc"] is None
    assert message["From"] == "Sluice <hello@sluice.example>"
    assert message["Message-ID"] == "<welcome_u1@sluice.example>"
    assert message["Auto-Submitted"] == "auto-generated"
    assert message["Date"]
    assert message.get_content().startswith("Hello Ada,")
    again = compose(outgoing, "Sluice <hello@sluice.example>")
    assert again["Message-ID"] == message["Message-ID"]


def test_an_address_that_cannot_be_written_is_a_permanent_failure() -> None:
    outgoing = Outgoing(
        key="welcome_u1",
        recipient="not an address@@",
        content=templates.welcome(None, "http://x", VERIFY),
    )
    with pytest.raises(HandlerError) as error:
        compose(outgoing, "sluice@localhost")
    assert error.value.permanent


def test_list_unsubscribe_stays_one_line_of_urls_however_long() -> None:
    # RFC 2369: angle-bracketed URLs; the email package would fold a long one into RFC 2047
    # encoded words, which mail providers do not decode in this header.
    url = "https://sluice.example.org/v1/unsubscribe?token=u1." + "r" * 36 + "." + "m" * 43
    outgoing = Outgoing(
        key="reminder_r1_20250101T000000Z",
        recipient="ada@example.org",
        content=templates.reminder("x", datetime(2025, 1, 1, tzinfo=UTC), "UTC", url),
        headers=(
            ("List-Unsubscribe", f"<{url}>"),
            ("List-Unsubscribe-Post", "List-Unsubscribe=One-Click"),
        ),
    )
    raw = compose(outgoing, "sluice@localhost").as_bytes(policy=email.policy.SMTP)
    assert f"\r\nList-Unsubscribe: <{url}>\r\n".encode() in raw
    assert b"\r\nList-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n" in raw
    assert b"=?" not in raw


def test_a_header_value_with_a_line_break_is_refused_permanently() -> None:
    outgoing = Outgoing(
        key="welcome_u1",
        recipient="a@example.org",
        content=templates.welcome(None, "http://x", VERIFY),
        headers=(("List-Unsubscribe", "<https://x/>\r\nBcc: all@example.org"),),
    )
    with pytest.raises(HandlerError) as error:
        compose(outgoing, "sluice@localhost")
    assert error.value.permanent
