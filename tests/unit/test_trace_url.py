"""SLUICE_TRACE_URL (docs/guides/tracing.md): a template the start refuses, naming the
variable and its app, unless it is an http(s) URL with {trace_id}; filled in, the trace
id is URL-encoded."""

from __future__ import annotations

import pytest

from sluice.app.settings import read_settings
from sluice.builtin.operations.app import app
from sluice.builtin.operations.settings import OperationsSettings
from sluice.config import load_config
from sluice.errors import ConfigError


@pytest.mark.parametrize(
    "template",
    [
        "http://localhost:16686/trace/{trace_id}",
        "https://grafana.example.com/explore?left=%7B%22queries%22:%5B%7B%22query%22:%22{trace_id}%22%7D%5D%7D",
        "https://ui.honeycomb.io/acme/environments/prod/trace?trace_id={trace_id}",
        "https://[2001:db8::1]:3000/trace/{trace_id}",
    ],
)
def test_an_http_url_with_the_trace_id_is_taken(template: str) -> None:
    config = load_config({"SLUICE_TRACE_URL": template})
    read_settings([app], config)
    assert OperationsSettings.of(config).trace_url == template


@pytest.mark.parametrize(
    "template",
    [
        "http://localhost:16686/trace/",  # nowhere for the trace id
        "http://localhost:16686/trace/{traceid}",
        "localhost:16686/trace/{trace_id}",  # no scheme
        "ftp://traces.example.com/{trace_id}",
        "javascript:alert(1)//{trace_id}",
        "http:///trace/{trace_id}",  # no host
        "http://localhost:16686/trace/ {trace_id}",
        "http://[::1/trace/{trace_id}",
    ],
)
def test_anything_else_refuses_the_start_naming_the_variable(template: str) -> None:
    config = load_config({"SLUICE_TRACE_URL": template})
    with pytest.raises(ConfigError) as refused:
        read_settings([app], config)
    message = str(refused.value)
    assert message.startswith("SLUICE_TRACE_URL must be an http:// or https:// URL containing")
    assert repr(template) in message and "(a setting of app 'operations')" in message


def test_the_trace_id_is_url_encoded_into_the_template() -> None:
    settings = OperationsSettings(trace_url="https://t.example/trace/{trace_id}?from=admin")
    assert settings.trace_link("4bf92f3577b34da6a3ce929d0e0e4736") == (
        "https://t.example/trace/4bf92f3577b34da6a3ce929d0e0e4736?from=admin"
    )
    # sluice's own trace ids are hex; a client's may hold : / . _ - (a request's id).
    assert settings.trace_link("job:a/b?c") == "https://t.example/trace/job%3Aa%2Fb%3Fc?from=admin"
    assert OperationsSettings().trace_link("4bf92f3577b34da6a3ce929d0e0e4736") is None
