"""``sluice up``'s check of its address before it starts anything (sluice.cli.ports):
what it refuses, in one line, and that it leaves nothing bound behind it."""

from __future__ import annotations

import socket

import pytest

from sluice.cli.ports import check_listenable
from sluice.errors import ConfigError


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_free_port_passes_and_is_left_free() -> None:
    port = _free_port()
    check_listenable("127.0.0.1", port)
    # Not even SO_REUSEADDR needed: the probe's socket is closed, nothing of it remains.
    with socket.socket() as after:
        after.bind(("127.0.0.1", port))
        after.listen()


def test_a_port_in_use_names_a_free_one_to_set() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        with pytest.raises(ConfigError) as refused:
            check_listenable("127.0.0.1", port)
    said = str(refused.value)
    assert said.startswith(f"port {port} on 127.0.0.1 is in use (by another program, or")
    suggested = int(said.rsplit("SLUICE_PORT=", 1)[1])
    assert port < suggested <= port + 100


def test_a_port_a_connection_of_an_earlier_run_still_holds_is_free() -> None:
    """A previous ``sluice up`` whose connections are closing (TIME_WAIT) does not keep
    the next one from starting: the API binds with SO_REUSEADDR, and so does the check."""
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = int(server.getsockname()[1])
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = server.accept()
        accepted.close()  # the server's side closes first: its side waits in TIME_WAIT
        client.close()
    check_listenable("127.0.0.1", port)


def test_an_address_not_of_this_host_is_refused_with_the_settings_named() -> None:
    with pytest.raises(ConfigError) as refused:
        check_listenable("192.0.2.1", 8080)  # TEST-NET-1: never a local address
    assert str(refused.value).startswith(
        "cannot listen on 192.0.2.1 port 8080 (SLUICE_HOST, SLUICE_PORT): "
    )


def test_port_zero_is_any_free_port() -> None:
    check_listenable("127.0.0.1", 0)
