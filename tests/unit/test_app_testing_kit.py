"""The testing kit an app's tests get (``sluice.app.testing``): a child process of a
deployment gets every setting of its config, and the example app's tests need nothing
of sluice but ``sluice.app`` and ``sluice.app.testing``."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import msgspec
import pytest

from sluice.app.assembly import default_apps
from sluice.app.testing import child_env, free_port, wait_answering
from sluice.config import Config, load_config

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "orders"
PUBLIC = ("sluice.app", "sluice.app.testing")

# Settings checked when a config is built: a value each accepts that is not its default.
VALID: dict[str, Any] = {
    "redis_cluster_nodes": "127.0.0.1:7001,127.0.0.1:7002",
    "database_url": "postgresql://sluice@127.0.0.1:5433/shop",
    "timezone": "Europe/Paris",
    "log_format": "console",
    "log_level": "debug",
    "redirect_log": "all",
    "admin_token": "a" * 40,
    "trusted_proxies": "10.0.0.0/8",
    "history_hot_days": 30,
    "snapshot_every": "links=50,users=0",
    "mail_domain_rate": "100/min",
    "trace_url": "http://localhost:16686/trace/{trace_id}",
    "group_timeouts": {"loyalty": 12.5},
    "group_key_concurrency": {"web-hooks": "4"},
    "group_key_rates": {"web-hooks": "50/s"},
    "group_rates": {"web-hooks": "500/s"},
    "task_overlaps": {"reconcile-orders": "cancel_other"},
    "task_catchup_seconds": {"reconcile-orders": 90.0},
    "task_jitter_seconds": {"reconcile-orders": 3.0},
}


def _another(name: str, default: object, tmp_path: Path) -> object:
    """A value of setting ``name`` other than its ``default``, by the setting's type."""
    if name in VALID:
        return VALID[name]
    if isinstance(default, bool):
        raise AssertionError(f"{name}: a bool setting; give it a value in VALID")
    if isinstance(default, int):
        return default + 1
    if isinstance(default, float):
        return default + 0.25
    if isinstance(default, Path):
        return tmp_path / name
    if default is None or isinstance(default, str):
        return f"{default or ''}x"
    raise AssertionError(f"{name}: a setting of type {type(default).__name__}; add it to VALID")


def test_a_child_process_gets_every_setting_of_its_config(tmp_path: Path) -> None:
    """Every field of ``Config`` changed from its default: the child's environment builds
    the same config again (a setting added later is covered without a word here)."""
    defaults = Config()
    values = {
        field.name: _another(field.name, getattr(defaults, field.name), tmp_path)
        for field in msgspec.structs.fields(Config)
        if field.name != "app_values"
    }
    # And every setting of every built-in app (App(settings=...)), by its name.
    apps = [app.settings for app in default_apps().apps if app.settings is not None]
    for settings in apps:
        for field in msgspec.structs.fields(settings):
            values[field.name] = _another(field.name, field.default, tmp_path)
    config = load_config({}, **values)
    child = load_config(child_env(config))
    lost = [
        f"{f.name}: {getattr(config, f.name)!r} became {getattr(child, f.name)!r}"
        for f in msgspec.structs.fields(Config)
        if f.name != "app_values" and getattr(child, f.name) != getattr(config, f.name)
    ]
    lost += [
        f"{settings.__name__}: {settings.of(config)!r} became {settings.of(child)!r}"
        for settings in apps
        if settings.of(child) != settings.of(config)
    ]
    assert lost == []


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Constant) and str(node.value).startswith("sluice."):
            found.add(str(node.value).split()[0])  # pytest_plugins = ["sluice.app.testing"]
    return found


def test_a_child_given_another_port_or_data_dir_derives_its_urls_from_them(
    tmp_path: Path,
) -> None:
    """A child spawned with ``SLUICE_PORT`` (or ``SLUICE_DATA_DIR``) on top answers with
    URLs of its own port (its exports' status URLs), not of the config's default one."""
    config = load_config({"SLUICE_DATA_DIR": str(tmp_path / "a")})
    env = child_env(config, SLUICE_PORT="18123", SLUICE_DATA_DIR=str(tmp_path / "b"))
    child = load_config({k: v for k, v in env.items() if k.startswith("SLUICE_")})
    assert child.base_url == "http://127.0.0.1:18123"
    assert child.database_url == f"sqlite:///{tmp_path / 'b' / 'sluice.db'}"
    # Set explicitly, they are kept.
    pinned = load_config({"SLUICE_BASE_URL": "https://s.example", "SLUICE_DATA_DIR": str(tmp_path)})
    assert load_config(child_env(pinned, SLUICE_PORT="18123")).base_url == "https://s.example"


def test_the_example_app_uses_only_the_public_api_of_sluice() -> None:
    files = sorted(EXAMPLE.rglob("*.py"))
    assert len(files) > 10
    private = {
        f"{path.relative_to(EXAMPLE)}: {module}"
        for path in files
        for module in _imports(path)
        if (module == "sluice" or module.startswith("sluice.")) and module not in PUBLIC
    }
    assert sorted(private) == []


async def test_an_api_that_never_answers_is_named_with_what_it_answered() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(AssertionError) as failed:
        await wait_answering([url], timeout=0.3)
    assert f"no answer 200 to GET /healthz from {url} (ClientConnectorError" in str(failed.value)
