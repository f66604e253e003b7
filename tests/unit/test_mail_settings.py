"""SLUICE_SMTP_URL parsing: schemes, default ports, STARTTLS, credentials, and no leaks."""

from __future__ import annotations

import pytest

from sluice.builtin.accounts.mail.settings import SmtpSettings, parse_smtp_url
from sluice.builtin.accounts.mail.transport import EmlTransport, SmtpTransport, make_transport
from sluice.config import load_config
from sluice.errors import ConfigError


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("smtp://mail.example.com", SmtpSettings("mail.example.com", 25)),
        ("smtp://mail.example.com:2525", SmtpSettings("mail.example.com", 2525)),
        (
            "smtp://mail.example.com?starttls=true",
            SmtpSettings("mail.example.com", 587, start_tls=True),
        ),
        ("smtps://mail.example.com", SmtpSettings("mail.example.com", 465, use_tls=True)),
        ("SMTP://Mail.Example.com:26/", SmtpSettings("mail.example.com", 26)),
        ("smtp://[::1]:2525", SmtpSettings("::1", 2525)),
        ("smtp://h:25?starttls=false&timeout=2.5", SmtpSettings("h", 25, timeout=2.5)),
    ],
)
def test_urls_give_host_port_and_tls_mode(url: str, expected: SmtpSettings) -> None:
    assert parse_smtp_url(url) == expected


def test_credentials_are_percent_decoded() -> None:
    settings = parse_smtp_url("smtp://me%40corp.example:p%40ss%3Aw%2Fo%20rd@h:587?starttls=1")
    assert settings.username == "me@corp.example"
    assert settings.password == "p@ss:w/o rd"
    assert settings.start_tls


def test_an_empty_password_is_a_password() -> None:
    assert parse_smtp_url("smtp://relay-user:@h").password == ""


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://h:25", "smtp:// or smtps://"),
        ("mail.example.com:25", "smtp:// or smtps://"),
        ("smtp://:25", "no host"),
        ("smtp://h:99999", "invalid port"),
        ("smtp://h:port", "invalid port"),
        ("smtp://h/inbox", "no path"),
        ("smtp://h?starttls=maybe", "true or false"),
        ("smtp://h?startls=true", "unknown parameter 'startls'"),
        ("smtp://h?timeout=0", "timeout"),
        ("smtp://h?timeout=soon", "timeout"),
        ("smtps://h?starttls=true", "already TLS"),
        ("smtp://onlyuser@h", "both a user and a password"),
    ],
)
def test_bad_urls_are_refused_with_a_reason(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_smtp_url(url)


@pytest.mark.parametrize(
    "url", ["smtp://u:s3cret@h:99999", "smtp://u:s3cret@h?x=1", "http://u:s3cret@h"]
)
def test_errors_never_show_the_password(url: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_smtp_url(url)
    assert "s3cret" not in str(error.value)


def test_repr_and_redacted_form_hide_the_password() -> None:
    settings = parse_smtp_url("smtp://u:s3cret@h:587?starttls=true")
    assert "s3cret" not in repr(settings)
    assert settings.redacted() == "smtp://u:***@h:587?starttls=true"
    assert parse_smtp_url("smtps://h").redacted() == "smtps://h:465"


def test_the_transport_follows_the_config(tmp_path: object) -> None:
    eml = make_transport(load_config({}, data_dir=tmp_path))
    assert isinstance(eml, EmlTransport)
    assert eml.directory == load_config({}, data_dir=tmp_path).data_dir / "mail"
    smtp = make_transport(load_config({}, data_dir=tmp_path, smtp_url="smtp://h:2525"))
    assert isinstance(smtp, SmtpTransport)
    assert smtp.settings == SmtpSettings("h", 2525)
