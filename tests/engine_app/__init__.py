"""``engine-test``: a small app for the tests of sluice's engine (the codec, the relay,
the consumers and their dead letters, replays, the archive, the event search), so those
tests do not lean on a built-in app's events. One aggregate, ``pings``, keyed by
``source``; two events; one handler group that records the pings it handled; one
projection, ``ping-counts``, that counts them per source.

Load it as any app (docs/guides/write-an-app.md): ``SLUICE_APPS=default,tests.engine_app``;
``registered()`` registers its event types in this process's codec, for tests that only
encode and decode them."""

from __future__ import annotations

from sluice.app.assembly import loaded_apps
from sluice.config import load_config
from tests.engine_app import events, groups, projection  # noqa: F401  (declare)
from tests.engine_app.app import app
from tests.engine_app.events import PingAnswered, Pinged

APPS = "default,tests.engine_app"

__all__ = ["APPS", "PingAnswered", "Pinged", "app", "registered"]


def registered() -> None:
    """Register the app's event types in this process's codec (as a process that loads
    ``APPS`` does as it starts); once is enough, a second call does nothing."""
    loaded_apps(load_config({}, apps=APPS))
