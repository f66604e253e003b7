"""Link targets are judged by how they are written, never by a DNS lookup."""

from __future__ import annotations

import socket

import pytest

from sluice.builtin.links.rules import Invalid, check_url, short_origin


def test_no_name_is_looked_up_and_loopback_names_are_accepted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_lookup(*args: object, **kwargs: object) -> object:
        raise AssertionError(f"DNS lookup of {args[0]!r}")

    for name in ("getaddrinfo", "gethostbyname", "gethostbyname_ex"):
        monkeypatch.setattr(socket, name, no_lookup)
    own = short_origin("http://127.0.0.1:8080")
    # These resolve to 127.0.0.1 in public DNS; a browser asks its own resolver when
    # the link is followed, which may answer otherwise by then.
    for url in ("http://localtest.me:8080/", "http://127.0.0.1.nip.io:8080/"):
        assert check_url(url, own) == url
    with pytest.raises(Invalid, match="own short links"):
        check_url("http://127.1:8080/", own)
