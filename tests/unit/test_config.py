from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from sluice.app.assembly import assemble
from sluice.builtin.accounts.settings import AccountsSettings
from sluice.builtin.articles.settings import ArticlesSettings
from sluice.builtin.links.settings import LinksSettings
from sluice.builtin.reminders.settings import RemindersSettings
from sluice.config import load_config
from sluice.errors import ConfigError


def test_defaults_follow_the_spec(tmp_path: Path) -> None:
    config = load_config({"SLUICE_DATA_DIR": str(tmp_path)})
    assert config.redis_url is None
    assert config.port == 8080
    assert config.base_url == "http://127.0.0.1:8080"
    assert config.sqlite_path == tmp_path / "sluice.db"
    assert (config.claim_idle_ms, config.retry_base_ms, config.max_deliveries) == (60000, 2000, 5)
    assert (ArticlesSettings.of(config).view_dedupe_seconds, config.stream_retention) == (
        600,
        86400,
    )
    mail = AccountsSettings.of(config)
    assert (config.host, mail.smtp_url, mail.mail_from, mail.mail_rate) == (
        "127.0.0.1",
        None,
        "sluice@localhost",
        50.0,
    )
    assert (
        config.timezone,
        RemindersSettings.of(config).reminder_min_interval,
        LinksSettings.of(config).code_pool_target,
    ) == ("UTC", 60, 100_000)
    assert (config.stream_prefix, config.log_level) == ("sluice", "info")


def test_the_data_dir_defaults_to_var_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config({})
    assert config.data_dir == tmp_path / "var"
    assert config.sqlite_path == tmp_path / "var" / "sluice.db"


@pytest.mark.parametrize(("terminal", "log_format"), [(True, "console"), (False, "json")])
def test_logs_are_console_on_a_terminal_else_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, terminal: bool, log_format: str
) -> None:
    stderr = io.StringIO()
    monkeypatch.setattr(stderr, "isatty", lambda: terminal)
    monkeypatch.setattr(sys, "stderr", stderr)
    assert load_config({"SLUICE_DATA_DIR": str(tmp_path)}).log_format == log_format
    explicit = {"SLUICE_DATA_DIR": str(tmp_path), "SLUICE_LOG_FORMAT": "json"}
    assert load_config(explicit).log_format == "json"  # the variable wins over the guess


def test_environment_values_are_typed(tmp_path: Path) -> None:
    config = load_config(
        {"SLUICE_DATA_DIR": str(tmp_path), "SLUICE_PORT": "9000", "SLUICE_MAIL_RATE": "2.5"}
    )
    assert config.port == 9000
    assert AccountsSettings.of(config).mail_rate == 2.5
    assert config.base_url == "http://127.0.0.1:9000"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("SLUICE_PORT", "eighty", "integer"),
        ("SLUICE_TIMEZONE", "Mars/Olympus", "IANA"),
        ("SLUICE_MAX_DELIVERIES", "0", "at least 1"),
        ("SLUICE_DATABASE_URL", "mysql://x", "unsupported"),
        ("SLUICE_LOG_FORMAT", "xml", "json or console"),
        ("SLUICE_LOG_LEVEL", "verbose", "debug, info, warning, error, critical"),
        ("SLUICE_ADMIN_TOKEN", "s\u00e9same", "printable ASCII"),
        ("SLUICE_ADMIN_TOKEN", "a", "at least 32 characters"),
        ("SLUICE_ADMIN_TOKEN", "x" * 31, "at least 32 characters"),
        ("SLUICE_HEADER_TIMEOUT_SECONDS", "0", "more than 0"),
        ("SLUICE_BODY_TIMEOUT_SECONDS", "soon", "number"),
        ("SLUICE_MAX_CONNECTIONS", "0", "at least 1"),
        ("SLUICE_PASSWORD_HASH_CONCURRENCY", "0", "at least 1"),
        ("SLUICE_ADMIN_FAILURES_PER_CLIENT", "0", "at least 1"),
        ("SLUICE_TRUSTED_PROXIES", "10.0.0.0/8,proxy.internal", "not an IP address or CIDR"),
    ],
)
def test_bad_values_are_refused_with_the_variable_named(
    tmp_path: Path, name: str, value: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config({"SLUICE_DATA_DIR": str(tmp_path), name: value})


def test_reading_the_config_loads_no_metrics() -> None:
    """prometheus-client picks in-memory or multiprocess mode when it is imported, so
    ``sluice.cli.main`` reads the config and points it at the data dir first: the
    config must not import it (through the store, say), or every process counts alone."""
    code = "import sys, sluice.config; sys.exit('prometheus_client' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_abuse_limits_have_their_defaults_and_read_their_variables(tmp_path: Path) -> None:
    config = load_config({"SLUICE_DATA_DIR": str(tmp_path)})
    assert (config.header_timeout_seconds, config.body_timeout_seconds) == (10.0, 30.0)
    assert (config.keepalive_timeout_seconds, config.max_connections) == (75.0, 1000)
    assert (config.password_hash_concurrency, config.trusted_proxies) == (8, "")
    assert (config.logins_per_client, config.registrations_per_client) == (100, 20)
    assert (config.admin_failures_per_client, config.client_limit_window_seconds) == (10, 900)
    tuned = load_config(
        {
            "SLUICE_DATA_DIR": str(tmp_path),
            "SLUICE_HEADER_TIMEOUT_SECONDS": "0.5",
            "SLUICE_TRUSTED_PROXIES": "10.0.0.0/8, ::1",
            "SLUICE_ADMIN_TOKEN": "x" * 32,
        }
    )
    assert tuned.header_timeout_seconds == 0.5
    assert tuned.trusted_proxies == "10.0.0.0/8, ::1"
    assert tuned.admin_token == "x" * 32


def test_an_apps_setting_is_read_by_its_app_and_a_name_no_app_declares_is_refused() -> None:
    """The built-in apps' settings keep their SLUICE_* names, read when a process
    assembles its apps; a keyword no loaded app declares (a typo in a test's settings)
    is refused there."""
    config = load_config({"SLUICE_LINKS_PER_USER": "7"}, webhooks_per_user=2)
    assemble(config)
    links = LinksSettings.of(config)
    assert (links.links_per_user, links.webhooks_per_user) == (7, 2)
    with pytest.raises(ConfigError, match=r"SLUICE_VISIT_BATCH .* app 'links'"):
        assemble(load_config({"SLUICE_VISIT_BATCH": "0"}))
    with pytest.raises(ConfigError, match="named links_per_usr"):
        assemble(load_config({}, links_per_usr=3))
    only_accounts = load_config({"SLUICE_APPS": "accounts"}, links_per_user=3)
    with pytest.raises(ConfigError, match="named links_per_user"):
        assemble(only_accounts)
